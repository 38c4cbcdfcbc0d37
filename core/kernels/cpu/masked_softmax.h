// CPU kernels for the attention softmax with a key padding mask. Inputs contiguous, outputs
// allocated by the op.
#pragma once
#include "core/tensor.h"

namespace mt::core::cpu {
// scores, y [B, H, Sq, Sk]; key_mask [B, Sk] float (0 = masked) or undefined (no mask).
// y = softmax over the unmasked keys of scale * scores; masked keys get 0, and a row with no
// unmasked key (or only -inf scores) is all zeros.
void masked_softmax_forward(const Tensor& scores, const Tensor& key_mask, float scale, Tensor& y);
// The gradient with respect to the unscaled scores: gx = scale * y * (gy - sum(gy * y)) per
// row, zero wherever y is (masked keys, empty rows).
void masked_softmax_backward(const Tensor& y, const Tensor& gy, float scale, Tensor& gx);
}  // namespace mt::core::cpu
