// CPU kernels for softmax, log-softmax and the classification losses. Inputs contiguous,
// outputs allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// Along dimension `dim` of x; log selects log_softmax.
void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& y);
// From the forward output y: softmax gx = y * (gy - sum(gy * y)),
// log_softmax gx = gy - exp(y) * sum(gy).
void softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log, Tensor& gx);

// log_probs [N, K], targets int64 [N] (already range-checked), loss a 0-d tensor: the mean of
// -log_probs[i, targets[i]].
void nll_loss_forward(const Tensor& log_probs, const Tensor& targets, Tensor& loss);
// gloss: 0-d gradient of the loss; gx [N, K].
void nll_loss_backward(const Tensor& gloss, const Tensor& targets, Tensor& gx);

// Fused log_softmax + nll_loss. lse [N] receives each row's log-sum-exp for the backward pass.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse);
// gx = (softmax(logits) - onehot(targets)) * gloss / N.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& gloss, Tensor& gx);
}  // namespace mt::core::cpu
