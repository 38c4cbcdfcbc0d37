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

// The same copies with one pass over the values each, for loops that run every iteration
// (CD-SGD's step): no zero fill first, no copy of a gradient that can be a view.
// The values of params[first, last) concatenated into a new float32 vector.
Tensor gather_values(const std::vector<Tensor>& params, size_t first, size_t last);
// Every parameter's values into its slice of `flat` (total_numel values, written in place).
void flatten_values_into(const std::vector<Tensor>& params, Tensor& flat);
// Sets every parameter's gradient to its slice of `flat` itself, not a copy (a copy on the
// parameter's device where that differs): an optimizer step then reads flat directly, and may
// scale it in place (clipping). The caller drops the gradients (zero_grad) before the next
// backward, so nothing accumulates into flat.
void view_as_grads(const Tensor& flat, const std::vector<Tensor>& params);

}  // namespace mt::dist
