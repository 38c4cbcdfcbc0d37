// CPU kernels for cross-entropy over the rows whose target is not ignore_index. Inputs
// contiguous, outputs allocated by the op; targets are range-checked by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// logits [N, K], targets int64 [N]. loss (0-d) = sum over counted rows of lse - logits[i, t]
// divided by their count (0 when none); lse [N] keeps each counted row's log-sum-exp for
// backward (ignored rows are skipped, their lse left 0); count (0-d float) the counted rows.
void cross_entropy_ignore_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                  Tensor& loss, Tensor& lse, Tensor& count);
// gx = (softmax(logits) - onehot(t)) * gloss / count on counted rows, 0 on ignored rows.
void cross_entropy_ignore_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                   const Tensor& lse, const Tensor& count, const Tensor& gloss, Tensor& gx);
}  // namespace mt::core::cpu
