#include "dist/compress/compression_config.h"

#include "core/error.h"
#include "dist/registry.h"

namespace mt::dist {

CompressionOptions compression_options(const mintrain::CompressorConfig& config) {
  CompressionOptions c;
  c.type = config.type();
  c.tau = config.tau();
  c.topk_ratio = config.topk_ratio();
  c.topk_warmup_iters = config.topk_warmup_iters();
  return c;
}

void validate_compressor(const mintrain::CompressorConfig& config) {
  check_above("dist.compressor.tau", config.tau(), 0.0);
  MT_CHECK(config.topk_ratio() > 0 && config.topk_ratio() <= 1, "dist.compressor.topk_ratio must be in (0, 1] (got ",
           config.topk_ratio(), ")");
  check_at_least("dist.compressor.topk_warmup_iters", config.topk_warmup_iters(), 0);
}

std::optional<MomentumCorrectionOptions> momentum_correction_options(const AlgorithmContext& c) {
  const mintrain::OptimizerConfig& opt = c.optimizer;
  if (!c.dist.compressor().momentum_correction() || opt.name() != "sgd" || opt.momentum() <= 0) return std::nullopt;
  MomentumCorrectionOptions m;
  m.momentum = opt.momentum();
  m.dampening = opt.dampening();
  m.nesterov = opt.nesterov();
  if (!opt.decoupled_weight_decay()) m.weight_decay = opt.weight_decay();
  m.mask_sent = c.dist.compressor().type() == "topk";  // momentum factor masking, for sparse payloads
  return m;
}

}  // namespace mt::dist
