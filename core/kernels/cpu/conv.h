// CPU kernels for 2-d convolution (NCHW). x: [N, C, H, W], w: [O, C, kh, kw], bias: [O] or
// undefined, y: [N, O, Ho, Wo]; all contiguous, outputs allocated by the op.
// Two implementations: oneDNN's (conv_dnnl.cpp) in builds that have it, the fast one; and
// im2col + GEMM per sample with the samples in parallel (conv.cpp), the reference the tests
// hold the fast one to and the path of builds without oneDNN.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y);
// Gradients of x, w and bias; an undefined output tensor means "not needed" and skips its work
// (the first layer needs no gx, a frozen layer no gw).
void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);

enum class ConvImpl { Fast, Reference };
// Which implementation conv2d_forward/backward run (process-wide; Fast by default, Reference
// when the environment has MT_CONV=reference). Fast is the reference in a build without oneDNN.
void set_conv_impl(ConvImpl impl);
ConvImpl conv_impl();
bool conv_has_fast_impl();  // built with oneDNN

// The reference kernels themselves, float32 (no compute-precision rounding).
void conv2d_forward_reference(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                              int64_t padding, Tensor& y);
void conv2d_backward_reference(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                               int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb);
}  // namespace mt::core::cpu
