// CPU kernels for concatenation along one dimension and its inverse (splitting a gradient).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::core::cpu {
// xs contiguous, same shape except along dim; out contiguous with the summed size there.
void cat_forward(const std::vector<Tensor>& xs, int64_t dim, Tensor& out);
// Copies g's slice for input i (sizes[i] long along dim) into gxs[i]; undefined entries are
// inputs that need no gradient and are skipped.
void cat_backward(const Tensor& g, int64_t dim, const std::vector<int64_t>& sizes,
                  std::vector<Tensor>& gxs);
}  // namespace mt::core::cpu
