// CUDA twins of kernels/cpu/masked_softmax.h.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void masked_softmax_forward(const Tensor& scores, const Tensor& key_mask, float scale, Tensor& y);
void masked_softmax_backward(const Tensor& y, const Tensor& gy, float scale, Tensor& gx);
}  // namespace mt::core::cuda
