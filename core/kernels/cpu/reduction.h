// CPU reduction kernels.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::core::cpu {
// out has x's rank with size 1 along each reduced dimension (contiguous).
void sum_dims(const Tensor& x, const std::vector<bool>& reduce, Tensor& out);
void argmax_dim(const Tensor& x, int64_t dim, Tensor& indices);
}  // namespace mt::core::cpu
