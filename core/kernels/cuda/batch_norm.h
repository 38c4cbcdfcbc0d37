// CUDA twins of kernels/cpu/batch_norm.h, with the CPU's formulas: two-pass statistics in
// double, biased variance for normalization, unbiased for the running variance.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, bool relu, Tensor& y, Tensor& save_mean, Tensor& save_invstd);
void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& save_mean, const Tensor& save_invstd, const Tensor& gy,
                         bool training, bool relu, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cuda
