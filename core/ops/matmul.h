// Matrix products: matmul of 2-d and batched 3-d tensors, and linear (x W^T + b), the
// fully-connected layer's op, which fuses the bias into the GEMM's output.
#pragma once
#include "core/tensor.h"

namespace mt::core {

// [m, k] x [k, n] -> [m, n];  [B, m, k] x [B, k, n] -> [B, m, n].
Tensor matmul(const Tensor& a, const Tensor& b);
// x: [N, in], weight: [out, in], bias: [out] or undefined -> [N, out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mt::core
