// CUDA twins of kernels/cpu/cross_entropy_ignore.h. The op range-checks targets only for CPU
// tensors; the forward kernel here flags a bad target on the device (it is not read through)
// and throws the same Error afterwards (one small synchronous copy per loss evaluation).
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void cross_entropy_ignore_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                  Tensor& loss, Tensor& lse, Tensor& count);
void cross_entropy_ignore_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                   const Tensor& lse, const Tensor& count, const Tensor& gloss, Tensor& gx);
}  // namespace mt::core::cuda
