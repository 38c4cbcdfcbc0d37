// Differentiable reductions, and argmax for metrics.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::core {

Tensor sum(const Tensor& x);  // all elements -> a 0-d tensor
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Largest value along `dim` and its index (int64); not differentiable.
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace mt::core
