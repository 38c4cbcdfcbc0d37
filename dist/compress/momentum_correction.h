// Momentum correction (DGC, Lin et al. 2018) for lossy gradient compression with momentum SGD.
//
// Without it, each rank compresses its raw gradient (with error feedback) and the global step
// applies momentum to the averaged decoded gradients. A lossy compressor releases an element's
// accumulated residual in one burst (TWO_BIT: a whole +-tau); momentum then repeats that burst
// over the next ~1/(1-m) steps, so the quantum of the weight update grows 10x at m = 0.9 and
// the delayed, bursty updates destabilize training (measured: LeNet with TWO_BIT and momentum
// 0.9 loses 4-6 points under compressed S-SGD and diverges under CD-SGD; dist/README.md).
//
// With it, each rank keeps its own velocity and exchanges that instead:
//
//   d = g + wd*w                 (L2 weight decay on this rank's weights; decoupled decay is
//                                 applied by the global step instead)
//   u <- m*u + (1-dampening)*d   (u = d on the first step, as optim::SGD)
//   send EF(u), or EF(d + m*u) with Nesterov
//
// and the global step is plain SGD, W <- W - lr * mean_i decode(...): the momentum is already
// inside what was sent. That step is the trainer's optimizer, built without momentum and L2
// decay for such synchronizers (Synchronizer::takes_over_momentum), so its NaN/Inf guard and
// clipping still apply; decoupled weight decay stays with it. Because the exchange is linear in u, NONE compression gives exactly
// momentum SGD on the averaged gradient (up to float summation order). Compression now rounds
// the velocity, which moves ~1/(1-m) times faster than the gradient, so the residual crosses a
// threshold sooner and the quantum of an update is tau, not tau/(1-m).
//
// Momentum factor masking (DGC): where a sparse compressor (TOPK) sends a coordinate, its
// velocity is cleared, since the accumulated value it carried has just been applied and would
// otherwise keep pushing with stale momentum. It is off for dense compressors (TWO_BIT, SIGN,
// FP16), which send most coordinates often: masking would switch momentum off for them.
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
