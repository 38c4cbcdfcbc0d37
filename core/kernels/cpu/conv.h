// CPU kernels for 2-d convolution. x: [N, C, H, W], w: [O, C, kh, kw], bias: [O] or
// undefined, y: [N, O, Ho, Wo]; outputs allocated by the op. w and bias are contiguous; x and gx
// share one format, y and gy another, each contiguous (NCHW) or channels-last (NHWC,
// core/memory_format.h). oneDNN computes in channels-last without reordering it; the reference
// kernels know NCHW only and take channels-last operands through NCHW copies.
// Two implementations: oneDNN's (conv_dnnl.cpp) in builds that have it, the fast one, on
// channels-last activations with Winograd for the wide 3x3 layers; and im2col + GEMM per sample
// with the samples in parallel (conv.cpp), the reference the tests hold the fast one to (they
// call conv2d_*_reference directly) and the path of builds without oneDNN.
#pragma once
#include <string>

#include "core/tensor.h"

namespace mt::core::cpu {
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y);
// Gradients of x, w and bias; an undefined output tensor means "not needed" and skips its work
// (the first layer needs no gx, a frozen layer no gw).
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);

bool conv_has_fast_impl();  // built with oneDNN
// The kernels conv2d_forward/backward run now on operands of these shapes and formats (float32):
// oneDNN's names for its three passes ("forward backward-data backward-weights", e.g.
// "jit_wino_4x3:avx512_core ..."), or "im2col" for the reference. For tests and logs.
std::string conv2d_kernel_names(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding);
// Whether conv2d's output should be channels-last now: oneDNN in use, at float32 compute
// precision (the 16-bit rounding works on NCHW).
bool conv2d_prefers_channels_last();

// The reference kernels themselves, float32 (no compute-precision rounding).
void conv2d_forward_reference(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                              int64_t padding, Tensor& y);
void conv2d_backward_reference(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                               int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cpu
