// Flat views of a parameter list: all parameters' values (or gradients) concatenated into one
// float32 vector in parameter order, and back. Compressed exchanges work on one flat buffer.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mt::dist {

using core::Tensor;

int64_t total_numel(const std::vector<Tensor>& params);
Tensor flatten_values(const std::vector<Tensor>& params);
// Missing gradients (parameter unused this iteration) count as zeros.
Tensor flatten_grads(const std::vector<Tensor>& params);
void unflatten_into_values(const Tensor& flat, const std::vector<Tensor>& params);
// Sets every parameter's gradient to its slice of flat (allocating where there was none).
void unflatten_into_grads(const Tensor& flat, const std::vector<Tensor>& params);

}  // namespace mt::dist
