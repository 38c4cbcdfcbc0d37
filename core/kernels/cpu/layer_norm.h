// CPU kernels for layer normalization over the last dimension, on x viewed as [N, D] rows.
// Inputs contiguous, outputs allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// y = (x - mean) * rstd * weight + bias per row, rstd = 1 / sqrt(biased var + eps); the row
// statistics mean [N] and rstd [N] are kept for backward.
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd);
// With xhat = (x - mean) * rstd and gxhat = gy * weight:
//   gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))   (row means over D)
//   gweight = sum over rows of gy * xhat,  gbias = sum over rows of gy.
// Each of gx, gweight, gbias is computed only when defined.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& gy, Tensor& gx, Tensor& gweight, Tensor& gbias);
}  // namespace mt::core::cpu
