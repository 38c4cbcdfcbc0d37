// The fused Adam/AdamW update (called by optim/adam.cpp). The per-element arithmetic lives here
// once, as an MT_HOST_DEVICE function that the CPU loop (Adam::step_cpu) and the CUDA kernel
// both call, so the two devices cannot drift apart; this header is therefore plain C++ and is
// included by CPU-only builds too. adam_update() itself exists only in CUDA builds.
#pragma once
#include <cmath>

#include "core/host_device.h"
#include "core/tensor.h"

namespace mt::core::cuda {

// Everything that is constant over one parameter's update, folded in double by the caller and
// rounded to float once (as PyTorch passes Python floats to float kernels).
struct AdamUpdate {
  float l2 = 0.0f;         // Adam's L2 weight decay: g = grad + l2 * p
  float shrink = 1.0f;     // AdamW's decoupled weight decay: p = p * shrink (1 - lr * wd)
  float beta1_weight = 0;  // 1 - beta1: m moves this fraction of the way towards g
  float beta2 = 0.0f;
  float beta2_weight = 0;  // 1 - beta2
  float step_size = 0;     // lr / (1 - beta1^t)
  float bias2_sqrt = 1;    // sqrt(1 - beta2^t)
  float eps = 0.0f;
};

// One element: reads p, g, m, v and writes p, m, v. The order of operations follows PyTorch's
// single-tensor (non-foreach) Adam, op by op, so results agree to float rounding.
MT_HOST_DEVICE inline void adam_element(float& p, float g, float& m, float& v, const AdamUpdate& u) {
  g = g + u.l2 * p;
  p = p * u.shrink;
  // PyTorch's lerp for beta1 > 0.5, the usual case (for smaller beta1 it uses the mirrored form
  // g - (g - m) * beta1, equal up to rounding). One form and no branch: a data-independent
  // select would count as speculating float ops under -ftrapping-math and stop vectorization.
  m = m + u.beta1_weight * (g - m);
  v = v * u.beta2;
  v = v + u.beta2_weight * g * g;
  const float denom = sqrtf(v) / u.bias2_sqrt + u.eps;
  p = p + (-u.step_size) * m / denom;
}

// param, grad, exp_avg and exp_avg_sq: contiguous float32 tensors of one size on one CUDA
// device; the moments are updated in place.
void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamUpdate& u);

}  // namespace mt::core::cuda
