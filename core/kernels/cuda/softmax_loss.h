// CUDA twins of kernels/cpu/softmax_loss.h. The CPU op checks label ranges before calling its
// kernels; for CUDA tensors the op leaves that to these kernels (reading the labels on the host
// would copy them back), which flag a bad label on the device and throw the same kind of Error
// after the forward kernel.
#pragma once
#include "core/tensor.h"

namespace mt::core::cuda {
void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log, Tensor& gx);
void nll_loss_forward(const Tensor& log_probs, const Tensor& targets, Tensor& loss);
void nll_loss_backward(const Tensor& gloss, const Tensor& targets, Tensor& gx);
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& gloss, Tensor& gx);
}  // namespace mt::core::cuda
