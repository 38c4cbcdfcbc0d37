// CUDA twins of kernels/cpu/pooling.h, written to match the CPU semantics exactly: max pooling
// keeps the first maximum and lets NaN win; average pooling divides by the in-image part of the
// window (padding not counted).
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                        Tensor& y, Tensor& indices);
void max_pool2d_backward(const Tensor& gy, const Tensor& indices, Tensor& gx);
void avg_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor& y);
void avg_pool2d_backward(const Tensor& gy, int64_t kernel, int64_t stride, int64_t padding, Tensor& gx);
void global_avg_pool2d_forward(const Tensor& x, Tensor& y);
void global_avg_pool2d_backward(const Tensor& gy, Tensor& gx);
}  // namespace mt::core::cuda
