// Momentum correction (DGC, Lin et al. 2018; README.md): each rank keeps its velocity
// u <- m·u + (1-dampening)·(g + wd·w) (u = d on the first step, as optim::SGD; Nesterov sends
// d + m·u) and exchanges it instead of g, so the global step is plain SGD on the average and a
// lossy compressor's bursts are not repeated by momentum. TOPK clears u where it sent.
#pragma once
#include <cstdint>

#include "core/serialize.h"
#include "core/tensor.h"

namespace mt::dist {

using core::Tensor;

struct MomentumCorrectionOptions {
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;         // L2, folded into d (decoupled decay stays with the optimizer)
  bool mask_sent = false;            // momentum factor masking (TOPK)
};

class MomentumCorrection {
 public:
  MomentumCorrection(int64_t numel, MomentumCorrectionOptions options);

  // Advances the velocity with this rank's gradient and returns the direction to exchange
  // (flat float32; grad and weights flat of numel()).
  Tensor direction(const Tensor& grad, const Tensor& weights);
  // Momentum factor masking: clears the velocity where this rank's own decoded payload is
  // non-zero (no-op unless options.mask_sent).
  void mask_sent(const Tensor& decoded);

  int64_t numel() const { return velocity_.numel(); }
  const MomentumCorrectionOptions& options() const { return options_; }
  const Tensor& velocity() const { return velocity_; }
  // Checkpoints: appends "velocity" and "velocity_started"; load_state restores them, and
  // keeps a zero velocity when the state has none (a checkpoint of a run without correction).
  void append_state(core::StateDict& state) const;
  void load_state(const core::StateDict& state);

 private:
  MomentumCorrectionOptions options_;
  Tensor velocity_;
  bool started_ = false;
};

}  // namespace mt::dist
