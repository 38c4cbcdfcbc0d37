// CUDA twins of kernels/cpu/layer_norm.h.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& gy, Tensor& gx, Tensor& gweight, Tensor& gbias);
}  // namespace mt::core::cuda
