// CD-SGD (docs/algorithms.md section 2; README.md): local weights w for forward and backward,
// global weights W identical on every rank; iteration t's compressed exchange runs while t+1
// computes, end_iteration applies exchange t-1 to W and takes the delay-compensated local step.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "dist/cdsgd/exchange_pipeline.h"
#include "dist/compress/gradient_exchange.h"
#include "dist/compress/momentum_correction.h"
#include "optim/registry.h"
#include "dist/replicas.h"
#include "dist/synchronizer.h"

namespace mt::dist {

struct CdsgdOptions : SynchronizerOptions {
  CompressionOptions compression;  // default NONE; the reference uses TWO_BIT tau 0.5
  int warmup_iters = 100;          // plain S-SGD iterations first (reference code: 1000)
  int k = 5;                       // every k-th iteration after warm-up is full precision; 0 = never
  double lambda = 0.04;            // delay-compensation strength; 0 = OD-SGD
  std::optional<MomentumCorrectionOptions> momentum_correction;  // set: DGC momentum correction
  // The local step's rate as a multiple of the optimizer's current one (cdsgd.local_lr /
  // optimizer.lr, so it follows the schedule); 1 = the global rate.
  double local_lr_factor = 1.0;
  // The local step's plain SGD: its weight decay (lr and momentum are ignored). Under momentum
  // correction L2 decay is already inside the velocity, so only decoupled decay belongs here.
  optim::OptimizerOptions local_step;
  // TWO_BIT: tau is on the per-sample-sum scale; the threshold on the batch-mean gradient is
  // tau / samples_per_rank (1 = tau as given: the "batch_mean" scale).
  int64_t samples_per_rank = 1;
  double bucket_cap_mb = 4;  // compression buckets (float32 MB), in backward order
  std::string exchange = "auto";  // "auto", "allgather", "reduce_scatter" (gradient_exchange.h)
  // Set: used instead of compression.type (tests: a compressor slowed on purpose).
  std::shared_ptr<const Compressor> compressor;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // the worker threads' tasks
  // Micro-batches per step: the gradients accumulate locally; compressed and sent after the last.
  int grad_accumulation_steps = 1;
};

class CdsgdSynchronizer final : public Synchronizer {
 public:
  CdsgdSynchronizer(std::shared_ptr<ProcessGroup> group, CdsgdOptions options);

  std::string name() const override;
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  // Copies the gradient into its bucket; a complete bucket (and the complete ones after it, in
  // bucket order) goes to the communication side at once.
  void on_gradient_ready(size_t param_index, core::Tensor& param) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // prepare_eval, then every rank's local weights, residual and velocity to rank 0 (they differ
  // between ranks; replicas.h), stored by state_dict as "cdsgd.rank<r>.*".
  void prepare_checkpoint(layers::Module& model) override;
  std::string epoch_summary() override;
  bool takes_over_momentum() const override { return options_.momentum_correction.has_value(); }

  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  // Introspection (tests).
  const CdsgdOptions& options() const { return options_; }
  const Tensor& global_weights() const { return global_; }
  int64_t steps() const { return steps_; }
  ExchangePipeline& pipeline() { return *pipeline_; }
  size_t buckets() const { return buckets_.size(); }
  // Buckets of the iteration under way already handed to the communication side (by the
  // grad-ready hooks, before step()).
  size_t launched_buckets() const { return current_ ? next_launch_ : 0; }
  // Delayed steps that returned while their own iteration's compression was still running (the
  // training thread did not wait for it).
  int64_t steps_before_encoding_done() const { return steps_before_encoding_done_; }

 private:
  // Parameters [first, last) in registration order, one compression message; numel and flat
  // offset are its pipeline range. Bucket 0 holds the last parameters (backward order).
  struct ParamBucket {
    size_t first = 0, last = 0;
    Tensor values;                 // this iteration's gradients (host), filled by the hooks
    size_t pending = 0;
    std::vector<bool> arrived;
    bool launched = false;
    Tensor direction;              // what was launched: the gradient or the velocity
    // This iteration's local weights w of the bucket, copied at launch (momentum correction's
    // decay term) or in step(): the delay compensation reads them after W is in the parameters.
    Tensor weights;
  };
  bool delayed() const { return steps_ > options_.warmup_iters; }
  bool full_precision_now() const;  // this iteration's exchange: warm-up and every k-th
  void build_buckets();
  void start_iteration_if_needed();
  // Launches the complete buckets, in bucket order, from the next one not launched.
  void launch_ready();
  void launch_bucket(size_t b);
  void mask_velocity(size_t b);  // momentum factor masking with the last exchange's payload
  // Applies the exchange in flight to W (the optimizer, or plain SGD under momentum
  // correction, steps W with the lr of its iteration). Leaves W in the model's parameters:
  // the caller puts back what it wants there.
  void apply_pending();
  // W <- update(W, averaged decoded gradients) at learning rate lr.
  void step_global(const Tensor& average, double lr);
  // w <- W - lr_local * local_direction, through the step guard when the optimizer is one.
  void step_local(optim::StepGuard& optimizer, const Tensor& local_direction);
  core::StateDict own_state() const;  // what differs between ranks
  void append_velocity(core::StateDict& state) const;
  void load_velocity(const core::StateDict& state);

  std::shared_ptr<ProcessGroup> group_;
  CdsgdOptions options_;
  std::shared_ptr<const Compressor> compressor_;
  std::unique_ptr<ExchangePipeline> pipeline_;
  std::vector<ParamBucket> buckets_;
  std::vector<int> bucket_of_;  // parameter -> bucket
  std::vector<int64_t> param_offset_;  // parameter -> flat offset
  std::vector<std::unique_ptr<MomentumCorrection>> momentum_;  // per bucket, with momentum correction
  std::unique_ptr<optim::Optimizer> local_sgd_;  // the local step
  optim::Optimizer* optimizer_ = nullptr;   // the trainer's; outlives this object
  std::vector<Tensor> params_;
  Tensor global_;  // W, flat (host)
  Tensor local_;   // the local weights while the model shows W (after prepare_eval)
  bool showing_global_ = false;
  RankStates rank_states_;  // every rank's local weights, residual, velocity (prepare_checkpoint)
  std::shared_ptr<PipelineIteration> current_;  // this iteration's, while its buckets launch
  std::shared_ptr<PipelineIteration> previous_; // the last launched (momentum factor masking)
  std::shared_ptr<PipelineIteration> pending_;  // launched, not yet applied to W
  size_t next_launch_ = 0;
  double pending_lr_ = 0.0;
  int64_t steps_ = 0;  // optimizer steps taken (iterations)
  int64_t steps_before_encoding_done_ = 0;
  int64_t iterations_since_summary_ = 0, full_since_summary_ = 0;
  double blocked_seconds_ = 0;  // the training thread, waiting for the previous exchange
  MicroBatches micro_batches_{options_.grad_accumulation_steps};
};

}  // namespace mt::dist
