// CPU kernels for 2-d convolution (NCHW): im2col + GEMM per sample, samples in parallel.
// x: [N, C, H, W], w: [O, C, kh, kw], bias: [O] or undefined, y: [N, O, Ho, Wo]; all
// contiguous, outputs allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y);
// Gradients of x, w and bias; an undefined output tensor means "not needed" and skips its work
// (the first layer needs no gx, a frozen layer no gw).
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cpu
