// CPU matmul kernels on tensors. Inputs may be transposed views: a 2-d operand whose inner
// stride is not 1 but whose outer stride is (a transpose) goes to BLAS as a transposed matrix.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
void matmul(const Tensor& a, const Tensor& b, Tensor& out);  // out contiguous, beta = 0
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void bias_grad(const Tensor& grad_out, Tensor& grad_bias);  // column sums of [N, out]
}  // namespace mt::core::cpu
