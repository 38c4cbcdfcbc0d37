// CPU kernels for activations. Outputs are allocated by the op in the inputs' format (contiguous
// or channels-last, core/memory_format.h); the loops run over the memory, whatever its order.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
void relu_forward(const Tensor& x, Tensor& y);
// gx = gy where the forward output y was positive, else 0 (y > 0 exactly when x > 0).
void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx);
// y = relu(a + b) in one pass (a residual block's end); a, b and y share shape and memory order.
void add_relu_forward(const Tensor& a, const Tensor& b, Tensor& y);
}  // namespace mt::core::cpu
