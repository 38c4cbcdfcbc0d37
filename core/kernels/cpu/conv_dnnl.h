// Convolution through oneDNN (builds with MT_WITH_DNNL): the same contract as conv2d_forward /
// conv2d_backward in conv.h, float32 only; conv.cpp decides when to call these. They return
// false, having done nothing, for a shape oneDNN has no kernel for.
#pragma once
#ifdef MT_WITH_DNNL
#include <string>

#include "core/tensor.h"

namespace mt::core::cpu::dnnl_conv {
bool forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding, Tensor& y);
bool backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride, int64_t padding, Tensor& gx,
              Tensor& gw, Tensor& gb);
// oneDNN's names for the kernels of the three passes ("forward backward-data backward-weights")
// that run on these operands, or "" when it has none; for tests and logs.
std::string kernel_names(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding, bool x_channels_last,
                         bool y_channels_last);
}  // namespace mt::core::cpu::dnnl_conv
#endif
