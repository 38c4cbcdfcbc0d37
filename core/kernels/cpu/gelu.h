// CPU kernels for GELU (exact erf form). Inputs contiguous, outputs allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// y = x * Phi(x), Phi(x) = 0.5 * (1 + erf(x / sqrt(2))) the standard normal CDF.
void gelu_forward(const Tensor& x, Tensor& y);
// gx = gy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) the normal density.
void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx);
}  // namespace mt::core::cpu
