// Compressed S-SGD: synchronous data parallelism whose gradients travel compressed, with error
// feedback (docs/algorithms.md section 1). After backward, all gradients are flattened into one
// buffer, g + r is compressed and exchanged (allreduce when summable, else allgather), every
// rank decodes and averages the same payloads and takes the same optimizer step, so replicas
// stay identical. Selected by dist.algorithm "ssgd" with a dist.compression other than NONE
// (with NONE the trainer keeps the uncompressed S-SGD schedules; this class with NONE equals
// S-SGD BSP, which a test checks).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "dist/gradient_exchange.h"
#include "dist/momentum_correction.h"
#include "dist/replicas.h"
#include "dist/synchronizer.h"
#include "mintrain.pb.h"

namespace mt::dist {

struct CompressedSsgdOptions {
  CompressionOptions compression;
  // Set: DGC momentum correction; the ranks exchange their velocities and the optimizer (plain
  // SGD: takes_over_momentum) steps with their average.
  std::optional<MomentumCorrectionOptions> momentum_correction;
  std::string config_text;  // must be the same on every rank (checked at setup)
};

class CompressedSsgdSynchronizer final : public Synchronizer {
 public:
  CompressedSsgdSynchronizer(std::shared_ptr<ProcessGroup> group, CompressedSsgdOptions options);

  std::string name() const override {
    return "ssgd/" + (exchange_ ? exchange_->compressor().name() : compressor_->name()) +
           (options_.momentum_correction ? "+momentum-correction" : "");
  }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void step(optim::Optimizer& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // prepare_eval, then every rank's residual and velocity to rank 0 (they differ between ranks;
  // replicas.h), stored by state_dict as "cssgd.rank<r>.*".
  void prepare_checkpoint(layers::Module& model) override;
  std::string epoch_summary() override;
  bool takes_over_momentum() const override { return options_.momentum_correction.has_value(); }
  bool keeps_state_per_rank() const override { return true; }  // residual, velocity

  // The error-feedback residual, the velocity (momentum correction) and the iteration count
  // (TOPK warm-up) travel with checkpoints.
  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  GradientExchange& exchange() { return *exchange_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  CompressedSsgdOptions options_;
  std::unique_ptr<Compressor> compressor_;  // until setup hands it to the exchange
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<MomentumCorrection> momentum_;  // with momentum correction
  std::vector<Tensor> params_;
  int64_t steps_ = 0;
  int64_t iterations_since_summary_ = 0;
  RankStates rank_states_;  // every rank's residual and velocity (prepare_checkpoint)
};

// Averages one value over the group's ranks (metrics); shared by the compressed synchronizers.
struct AlgorithmContext;  // registry.h

// dist.compressor as the exchange uses it, and its checks (errors name the field).
CompressionOptions compression_options(const mintrain::CompressorConfig& config);
void validate_compressor(const mintrain::CompressorConfig& config);
// DGC momentum correction, where the config asks for it and the optimizer is SGD with momentum.
std::optional<MomentumCorrectionOptions> momentum_correction_options(const AlgorithmContext& context);
// S-SGD with dist.compressor (algorithm "ssgd" builds it when the type is not "none").
std::unique_ptr<Synchronizer> make_compressed_ssgd(const AlgorithmContext& context);

}  // namespace mt::dist
