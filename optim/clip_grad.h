// Gradient clipping by global norm: if the L2 norm of all gradients together exceeds max_norm,
// every gradient is scaled by max_norm / norm, which keeps the update's direction but bounds its
// size (the usual guard against loss spikes in transformer training).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::optim {

// The global L2 norm of the parameters' gradients (parameters without one are skipped),
// accumulated in double.
double global_grad_norm(const std::vector<core::Tensor>& params);

// Returns the total norm before clipping. Parameters without a gradient are skipped. A
// non-finite norm is returned as is and nothing is scaled, so the caller can skip the step.
double clip_grad_norm(const std::vector<core::Tensor>& params, double max_norm);

// Multiplies every defined gradient by factor in place (a non-contiguous one is replaced by a
// contiguous copy first); shared by clipping and loss-scale unscaling.
void scale_grads(const std::vector<core::Tensor>& params, float factor);

}  // namespace mt::optim
