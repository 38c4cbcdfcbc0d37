// CUDA twins of kernels/cpu/embedding.h. The op range-checks indices only for CPU tensors;
// embedding_forward here flags a bad index on the device (it is not read through) and throws
// the same Error afterwards, at the cost of one small synchronous copy per call.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void embedding_forward(const Tensor& table, const Tensor& indices, Tensor& out);
void embedding_backward(const Tensor& gout, const Tensor& indices, Tensor& gtable);
}  // namespace mt::core::cuda
