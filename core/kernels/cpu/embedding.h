// CPU kernels for row gathers (embedding lookups). Inputs contiguous, outputs allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// out[i, :] = table[indices[i], :] for the N = indices.numel() indices (range-checked by the
// op); table [R, D], out [N, D].
void embedding_forward(const Tensor& table, const Tensor& indices, Tensor& out);
// gtable [R, D], every row written: row r is the sum of the rows gout[i, :] with
// indices[i] == r, added in increasing i (zero when r was not picked).
void embedding_backward(const Tensor& gout, const Tensor& indices, Tensor& gtable);
}  // namespace mt::core::cpu
