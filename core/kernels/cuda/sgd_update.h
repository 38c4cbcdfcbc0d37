// The SGD update (called by optim/sgd.cpp): weight decay, momentum, Nesterov and the step in one
// pass over the parameter. The per-element arithmetic lives here once, as sgd_element, which
// the CPU loop (sgd_cpu in optim/sgd.cpp), the CUDA kernel and DGC's momentum correction
// (dist/momentum_correction.cpp) all call, as Adam's adam_element; this header is therefore
// plain C++ and is included by CPU-only builds too. sgd_update() exists only in CUDA builds.
#pragma once
#include "core/host_device.h"
#include "core/tensor.h"

namespace mt::core::cuda {

struct SgdUpdate {
  float lr = 0.0f;
  float l2 = 0.0f;      // coupled weight decay: d = g + l2 * p
  float shrink = 1.0f;  // decoupled weight decay: p = p * shrink - lr * step
  float momentum = 0.0f;
  float keep = 1.0f;    // 1 - dampening
  bool nesterov = false;
};

// The step direction of one element, updating its momentum buffer: d = g + l2 p, then with
// momentum buf = d (first step) or momentum buf + keep d, and the direction d + momentum buf
// (Nesterov) or buf; without momentum, d (buf untouched).
MT_HOST_DEVICE inline float sgd_direction(float p, float g, float& buf, bool first, const SgdUpdate& u) {
  const float d = g + u.l2 * p;
  if (u.momentum == 0.0f) return d;
  buf = first ? d : u.momentum * buf + u.keep * d;
  return u.nesterov ? d + u.momentum * buf : buf;
}

// One element's step: p = p shrink - lr direction.
MT_HOST_DEVICE inline void sgd_element(float& p, float g, float& buf, bool first, const SgdUpdate& u) {
  const float step = sgd_direction(p, g, buf, first, u);
  p = p * u.shrink - u.lr * step;
}

// param and grad contiguous float32 on one device. With momentum != 0, `buffer` (same shape)
// holds the momentum; `first` says it is new (it is then set to d rather than updated).
void sgd_update(Tensor& param, const Tensor& grad, Tensor& buffer, bool first, const SgdUpdate& u);

}  // namespace mt::core::cuda
