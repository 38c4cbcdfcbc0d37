// Transformer ops (BERT): row gathers (embeddings), layer norm, GELU, the attention softmax
// with a padding mask, and cross-entropy over selected rows with ignored targets. Each is
// differentiable, with CPU kernels in core/kernels/cpu/ and CUDA twins in core/kernels/cuda/.
#pragma once
#include "core/random.h"
#include "core/tensor.h"

namespace mt::core {

// Rows of `table` [R, D] picked by int64 `indices` of any shape -> [indices..., D]. An index
// outside [0, R) is an Error naming it. The gradient of `table` is a dense [R, D] tensor in
// which only the picked rows are non-zero, summed per row in a fixed order (deterministic,
// no atomics). Embedding lookups and gathering the masked positions of an MLM batch use it.
Tensor embedding(const Tensor& table, const Tensor& indices);

// Normalizes over the last dimension: (x - mean) / sqrt(var + eps) * weight + bias, with the
// biased variance; weight and bias are [D] for x [..., D].
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-12f);

// GELU with the exact erf form: x * 0.5 * (1 + erf(x / sqrt(2))).
Tensor gelu(const Tensor& x);

// Softmax over the last dimension of attention scores [B, H, Sq, Sk], after scaling by `scale`
// and masking keys: key_mask [B, Sk] (float32, 1 = attend, 0 = padding) sends masked scores
// to -inf before the softmax (a row whose keys are all masked gives all zeros, not NaN).
// Undefined key_mask = no masking.
Tensor masked_softmax(const Tensor& scores, const Tensor& key_mask, float scale);

// Multi-head scaled dot-product attention: q, k, v [B, H, S, Dh] -> [B, H, S, Dh], i.e.
// dropout(masked_softmax(q k^T, key_mask, 1/sqrt(Dh))) v. On the CPU it is composed of
// batched matmuls and masked_softmax; on a GPU it may take a fused path. Attention dropout
// uses `gen` when training and p > 0.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                 float dropout_p, bool training, Generator& gen);

// Mean cross-entropy of logits [N, K] against int64 targets [N], over the rows whose target is
// not `ignore_index` (the mean's denominator is their count; no such rows -> loss 0 with zero
// gradients). A target outside [0, K) other than ignore_index is an Error.
Tensor cross_entropy_ignore(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

}  // namespace mt::core
