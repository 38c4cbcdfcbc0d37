// CUDA twins of kernels/cpu/matmul.h. Inputs may be transposed views (handed to cuBLAS as
// transposed matrices); 3-d operands run as one strided-batched GEMM.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void matmul(const Tensor& a, const Tensor& b, Tensor& out);  // out contiguous, beta = 0
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);
void bias_grad(const Tensor& grad_out, Tensor& grad_bias);  // column sums of [N, out]
}  // namespace mt::core::cuda
