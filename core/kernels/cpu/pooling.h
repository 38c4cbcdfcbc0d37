// CPU kernels for 2-d pooling over NCHW tensors (contiguous; outputs allocated by the op).
// Each (sample, channel) plane is independent, so planes are spread across threads. Max and
// global average pooling also take channels-last x (then y, gy, gx and the indices are
// channels-last too): the activations stay as the convolutions wrote them.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// indices (int64, shape of y): where in its H*W input plane each maximum came from.
void max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                        Tensor& y, Tensor& indices);
void max_pool2d_backward(const Tensor& gy, const Tensor& indices, Tensor& gx);

// Averages over the in-image part of each window (padding is not counted).
void avg_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor& y);
void avg_pool2d_backward(const Tensor& gy, int64_t kernel, int64_t stride, int64_t padding, Tensor& gx);

// [N, C, H, W] -> [N, C] and back.
void global_avg_pool2d_forward(const Tensor& x, Tensor& y);
void global_avg_pool2d_backward(const Tensor& gy, Tensor& gx);
}  // namespace mt::core::cpu
