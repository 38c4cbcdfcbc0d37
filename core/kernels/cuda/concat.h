// CUDA twins of kernels/cpu/concat.h: each input is one 2-d strided copy (cudaMemcpy2DAsync).
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mt::core::cuda {
void cat_forward(const std::vector<Tensor>& xs, int64_t dim, Tensor& out);
void cat_backward(const Tensor& g, int64_t dim, const std::vector<int64_t>& sizes,
                  std::vector<Tensor>& gxs);
}  // namespace mt::core::cuda
