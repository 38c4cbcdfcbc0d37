// CPU kernels for batch normalization. x is [N, C, H, W] (contiguous or channels-last, gy, y and
// gx in x's format) or [N, C] (contiguous); statistics are per channel over everything else.
// weight/bias may be undefined (1 and 0).
//
// relu fuses the ReLU that follows a batch norm in ResNet's blocks: forward writes
// max(0, bn(x)) in the normalizing pass, and backward zeroes gy where bn(x) <= 0, recomputing
// bn(x) from x (which the sums read anyway) instead of keeping a second activation. That saves
// the separate ReLU's passes over memory, each way.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// training: normalizes with the batch mean and biased variance, and (when defined) updates
// running_mean/running_var in place with the unbiased variance. Otherwise normalizes with the
// running statistics. Either way writes the mean and 1/sqrt(var + eps) it used ([C]) to
// save_mean/save_invstd for the backward pass.
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, bool relu, Tensor& y, Tensor& save_mean, Tensor& save_invstd);
// gx/gw/gb undefined = not needed. In training the batch statistics depend on x, which adds
// the two mean terms to gx; in evaluation they are constants. bias is only read with relu.
void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& save_mean, const Tensor& save_invstd, const Tensor& gy,
                         bool training, bool relu, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cpu
