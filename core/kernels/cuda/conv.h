// CUDA twins of kernels/cpu/conv.h: 2-d convolution (NCHW), through cuDNN when the build has it
// (and use_cudnn() is on), else im2col + cuBLAS. Same shapes and conventions as the CPU kernels:
// x [N, C, H, W], w [O, C, kh, kw], bias [O] or undefined, y [N, O, Ho, Wo], all contiguous.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y);
// An undefined gx, gw or gb means "not needed" and skips its work.
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cuda
