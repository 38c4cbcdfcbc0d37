// CUDA twins of kernels/cpu/reduction.h.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::core::cuda {
// out has x's rank with size 1 along each reduced dimension (contiguous). Sums in double.
void sum_dims(const Tensor& x, const std::vector<bool>& reduce, Tensor& out);
// The first index of the maximum (NaN is skipped unless it comes first), as on the CPU.
void argmax_dim(const Tensor& x, int64_t dim, Tensor& indices);
}  // namespace mt::core::cuda
