#include "dist/compressed_ssgd_synchronizer.h"

#include "core/error.h"
#include "dist/flat.h"
#include "dist/replicas.h"

#include "dist/dist_config.h"
#include "dist/registry.h"

namespace mt::dist {

CompressedSsgdSynchronizer::CompressedSsgdSynchronizer(std::shared_ptr<ProcessGroup> group,
                                                       CompressedSsgdOptions options)
    : group_(std::move(group)), options_(std::move(options)),
      compressor_(make_compressor(options_.compression)) {
  MT_CHECK(group_ != nullptr, "compressed S-SGD needs a process group");
}

void CompressedSsgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  for (const auto& p : params_)
    MT_CHECK(p.device().is_cpu(), "rank ", rank(), ": gradient compression runs on CPU tensors "
             "only (CUDA kernels are not written yet); use dist.compressor.type none on GPUs");
  check_replicas_agree(*group_, model, options_.config_text);
  broadcast_parameters(*group_, model);
  broadcast_buffers(*group_, model);
  exchange_ = std::make_unique<GradientExchange>(group_, std::move(compressor_), total_numel(params_));
  if (options_.momentum_correction)
    momentum_ = std::make_unique<MomentumCorrection>(total_numel(params_), *options_.momentum_correction);
  // No grad-ready hooks: the whole model is one buffer, exchanged after backward.
}

void CompressedSsgdSynchronizer::step(optim::Optimizer& optimizer) {
  MT_CHECK(exchange_ != nullptr, "rank ", rank(), ": step() before setup()");
  rank_states_.forget();
  exchange_->warm_up(options_.compression, steps_);
  ++steps_;
  ++iterations_since_summary_;
  if (!momentum_) {
    PendingExchange e = exchange_->launch(flatten_grads(params_), /*full_precision=*/false);
    unflatten_into_grads(exchange_->wait(e), params_);
    optimizer.step();
    return;
  }
  // Momentum correction: exchange the velocities, then the (plain SGD) optimizer steps with
  // their average.
  Tensor decoded;
  PendingExchange e = exchange_->launch(momentum_->direction(flatten_grads(params_), flatten_values(params_)),
                                        /*full_precision=*/false, &decoded);
  momentum_->mask_sent(decoded);
  unflatten_into_grads(exchange_->wait(e), params_);
  optimizer.step();
}

void CompressedSsgdSynchronizer::prepare_eval(layers::Module& model) {
  broadcast_buffers(*group_, model);  // batch-norm statistics: rank 0's, as S-SGD
}

void CompressedSsgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  if (rank_states_.collected() || !exchange_) return;
  core::StateDict mine{{"residual", exchange_->error_feedback().residual()}};
  if (momentum_) momentum_->append_state(mine);
  rank_states_.collect(*group_, mine, "compressed S-SGD checkpoint state");
}

std::string CompressedSsgdSynchronizer::epoch_summary() {
  if (!exchange_) return "";
  const std::string s = exchange_->take_summary(iterations_since_summary_);
  iterations_since_summary_ = 0;
  return s.empty() ? s : "compressed S-SGD " + s;
}

core::StateDict CompressedSsgdSynchronizer::state_dict() const {
  if (!exchange_) return {};
  core::StateDict state{{"residual", exchange_->error_feedback().residual().clone()},
                        {"steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
  if (momentum_) momentum_->append_state(state);
  rank_states_.append_to(state, "cssgd.");
  return state;
}

void CompressedSsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(exchange_ != nullptr, "internal: load_state_dict before setup");
  for (const auto& [name, t] : state) {
    if (name == "steps") steps_ = t.item_int();
    if (name != "residual") continue;
    MT_CHECK(t.numel() == exchange_->error_feedback().numel(), "checkpoint: the compression "
             "residual holds ", t.numel(), " values, the model ", exchange_->error_feedback().numel());
    exchange_->error_feedback().residual().copy_(t.reshape({t.numel()}));
  }
  if (momentum_) momentum_->load_state(state);
  // This rank's own residual and velocity, when the checkpoint has every rank's.
  if (const auto mine = rank_state(state, "cssgd.", rank(), world_size(), nullptr)) {
    for (const auto& [name, t] : *mine) {
      if (name != "residual") continue;
      MT_CHECK(t.numel() == exchange_->error_feedback().numel(), "checkpoint: the compression "
               "residual of rank ", rank(), " holds ", t.numel(), " values, the model ",
               exchange_->error_feedback().numel());
      exchange_->error_feedback().residual().copy_(t.reshape({t.numel()}));
    }
    if (momentum_) momentum_->load_state(*mine);
  }
}

CompressionOptions compression_options(const mintrain::CompressorConfig& config) {
  CompressionOptions c;
  c.type = config.type();
  c.tau = config.tau();
  c.topk_ratio = config.topk_ratio();
  c.topk_warmup_iters = config.topk_warmup_iters();
  return c;
}

void validate_compressor(const mintrain::CompressorConfig& config) {
  check_name("dist.compressor.type", config.type(), compressor_names());
  check_above("dist.compressor.tau", config.tau(), 0.0);
  MT_CHECK(config.topk_ratio() > 0 && config.topk_ratio() <= 1, "dist.compressor.topk_ratio must be in (0, 1] (got ",
           config.topk_ratio(), ")");
  check_at_least("dist.compressor.topk_warmup_iters", config.topk_warmup_iters(), 0);
}

std::optional<MomentumCorrectionOptions> momentum_correction_options(const AlgorithmContext& c) {
  const mintrain::OptimizerConfig& opt = c.optimizer;
  // Only an SGD momentum can be taken over (Adam keeps its moments).
  if (!c.dist.compressor().momentum_correction() || opt.name() != "sgd" || opt.momentum() <= 0) return std::nullopt;
  MomentumCorrectionOptions m;
  m.momentum = opt.momentum();
  m.dampening = opt.dampening();
  m.nesterov = opt.nesterov();
  if (!opt.decoupled_weight_decay()) m.weight_decay = opt.weight_decay();
  m.mask_sent = c.dist.compressor().type() == "topk";  // momentum factor masking, for sparse payloads
  return m;
}

std::unique_ptr<Synchronizer> make_compressed_ssgd(const AlgorithmContext& c) {
  MT_CHECK(c.dist.grad_accumulation_steps() == 1, "dist.grad_accumulation_steps must be 1 with dist.algorithm \"",
           c.dist.algorithm(), "\" and dist.compressor.type \"", c.dist.compressor().type(),
           "\" (gradient accumulation is implemented for uncompressed S-SGD only), got ",
           c.dist.grad_accumulation_steps());
  CompressedSsgdOptions o;
  o.compression = compression_options(c.dist.compressor());
  o.momentum_correction = momentum_correction_options(c);
  o.config_text = c.config_text;
  return std::make_unique<CompressedSsgdSynchronizer>(c.group, std::move(o));
}

}  // namespace mt::dist
