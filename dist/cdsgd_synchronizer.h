// CD-SGD: compressed, one-step-delayed exchange with delay compensation (docs/algorithms.md
// section 2; Yu et al. 2021). Every rank keeps two sets of weights:
//
//   w_i  local weights: the model's parameters, on which forward/backward run
//   W    global weights: identical on every rank, updated with the average of all ranks'
//        decoded gradients by the configured optimizer (the "server", run on every rank)
//
// Iteration t (after `warmup_iters` iterations of plain full-precision S-SGD):
//   1. backward on w_t gives g_t; its exchange (error feedback + compression, or full precision
//      every k-th iteration, which sends g + r and clears r) is launched in the background;
//   2. wait for exchange t-1 (launched one iteration ago, so mostly done) and apply it:
//      W <- optimizer(W, mean_i decode(Q(g_{t-1,i} + r_i)));
//   3. local update with delay compensation, from the newest W and this rank's own gradient:
//      w_{t+1} = W - lr * (g_t + lambda * g_t (.) g_t (.) (W - w_t))
//      (lambda = 0: plain one-step-delay SGD, OD-SGD).
// So exchange t overlaps the forward/backward of iteration t+1.
//
// The optimizer: the trainer's optimizer *is* the global one. Its parameter tensors are the
// model's, so step 2 copies W into them, sets their gradients to the average, steps the
// optimizer (momentum, weight decay: the global state, saved with checkpoints as usual), copies
// the result back into W, and step 3 writes the new local weights. This needs no second
// optimizer and no change to the Synchronizer interface, at the cost of two copies of the
// weights per iteration. The local update is plain SGD at the optimizer's current lr.
//
// With momentum correction (momentum_correction.h, DGC) each rank exchanges its velocity u
// instead of g, the global step is plain SGD W <- W - lr * mean(decoded) (the trainer builds
// the optimizer without momentum for it: takes_over_momentum), and the local update uses u:
// w_{t+1} = W - lr * (u_t + lambda * g_t (.) g_t (.) (W - w_t)), the same step W is about to take
// with this rank's share. Without it, lossy compression with momentum 0.9 diverges (the
// released residual bursts are repeated by the global momentum; dist/README.md).
//
// Evaluation and checkpoints use W: prepare_eval waits for the exchange in flight, applies it
// (with the lr of the iteration that produced it, so the result is the same as applying it in
// the next step), and shows W in the model; the next begin_iteration puts the local weights
// back. Checkpoints hold W (as the model), the iteration count and every rank's local weights,
// residual and velocity (state_dict, after prepare_checkpoint), so a resumed run continues
// exactly on every rank.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "dist/gradient_exchange.h"
#include "dist/momentum_correction.h"
#include "dist/replicas.h"
#include "dist/synchronizer.h"

namespace mt::dist {

struct CdsgdOptions {
  CompressionOptions compression;  // default NONE; the reference uses TWO_BIT tau 0.5
  int warmup_iters = 100;          // plain S-SGD iterations first (reference code: 1000)
  int k = 5;                       // every k-th iteration after warm-up is full precision; 0 = never
  double lambda = 0.04;            // delay-compensation strength; 0 = OD-SGD
  std::optional<MomentumCorrectionOptions> momentum_correction;  // set: DGC momentum correction
  std::string config_text;         // must be the same on every rank (checked at setup)
};

class CdsgdSynchronizer final : public Synchronizer {
 public:
  CdsgdSynchronizer(std::shared_ptr<ProcessGroup> group, CdsgdOptions options);

  std::string name() const override;
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  void step(optim::Optimizer& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // prepare_eval, then every rank's local weights, residual and velocity to rank 0 (they differ
  // between ranks; replicas.h), stored by state_dict as "cdsgd.rank<r>.*".
  void prepare_checkpoint(layers::Module& model) override;
  std::string epoch_summary() override;
  bool takes_over_momentum() const override { return options_.momentum_correction.has_value(); }

  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  // Introspection (tests).
  const Tensor& global_weights() const { return global_; }
  int64_t steps() const { return steps_; }
  GradientExchange& exchange() { return *exchange_; }

 private:
  bool delayed() const { return steps_ > options_.warmup_iters; }
  // Applies the exchange in flight to W (the optimizer, or plain SGD under momentum
  // correction, steps W with the lr of its iteration). May leave W in the model's parameters:
  // the caller puts back what it wants there.
  void apply_pending();
  // W <- update(W, averaged decoded gradients) at learning rate lr.
  void step_global(const Tensor& average, double lr);
  core::StateDict own_state() const;  // what differs between ranks

  std::shared_ptr<ProcessGroup> group_;
  CdsgdOptions options_;
  std::unique_ptr<Compressor> compressor_;  // until setup hands it to the exchange
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<MomentumCorrection> momentum_;  // with momentum correction
  optim::Optimizer* optimizer_ = nullptr;   // the trainer's; outlives this object
  std::vector<Tensor> params_;
  Tensor global_;  // W, flat
  Tensor local_;   // the local weights while the model shows W (after prepare_eval)
  bool showing_global_ = false;
  RankStates rank_states_;  // every rank's local weights, residual, velocity (prepare_checkpoint)
  PendingExchange pending_;
  double pending_lr_ = 0.0;
  int64_t steps_ = 0;  // optimizer steps taken (iterations)
  int64_t iterations_since_summary_ = 0, full_since_summary_ = 0;
};

}  // namespace mt::dist
