// CUDA twins of kernels/cpu/gelu.h.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx);
}  // namespace mt::core::cuda
