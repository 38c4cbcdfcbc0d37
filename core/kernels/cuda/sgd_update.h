// The fused SGD update for CUDA parameters (called by optim/sgd.cpp): weight decay, momentum,
// Nesterov and the step in one pass over the parameter, with the same arithmetic as the CPU
// loop in SGD::step_cpu, instead of the five or six in-place tensor ops of the generic path.
#pragma once
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

// param and grad contiguous float32 on one device. With momentum != 0, `buffer` (same shape)
// holds the momentum; `first` says it is new (it is then set to d rather than updated).
void sgd_update(Tensor& param, const Tensor& grad, Tensor& buffer, bool first, const SgdUpdate& u);

}  // namespace mt::core::cuda
