// CUDA twins of kernels/cpu/activation.h.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx);
void add_relu_forward(const Tensor& a, const Tensor& b, Tensor& y);
}  // namespace mt::core::cuda
