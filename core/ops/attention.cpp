// The attention softmax with a key padding mask, and scaled dot-product attention composed
// from it (declared in transformer.h).
#include <cmath>

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/masked_softmax.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/ops/transformer.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/masked_softmax.h"
#endif

namespace mt::core {

Tensor masked_softmax(const Tensor& scores, const Tensor& key_mask, float scale) {
  MT_CHECK(scores.dtype() == DType::Float32 && scores.dim() == 4,
           "masked_softmax expects float32 attention scores [batch, heads, queries, keys], got ", scores.str());
  MT_CHECK(std::isfinite(scale), "masked_softmax: scale must be finite, got ", scale);
  Tensor mask;
  if (key_mask.defined()) {
    MT_CHECK(key_mask.dtype() == DType::Float32 && key_mask.dim() == 2 &&
                 key_mask.shape()[0] == scores.shape()[0] && key_mask.shape()[1] == scores.shape()[3],
             "masked_softmax: key_mask must be float32 [batch, keys] = [", scores.shape()[0], ", ",
             scores.shape()[3], "] (1 = attend, 0 = padding) for scores ", scores.str(), ", got ",
             key_mask.str());
    MT_CHECK(key_mask.device() == scores.device(), "masked_softmax: key_mask ", key_mask.str(),
             " is on another device than the scores ", scores.str());
    mask = key_mask.detach().contiguous();  // a mask selects; it gets no gradient
  }
  Tensor xc = scores.contiguous();
  Tensor y = Tensor::empty(scores.shape(), DType::Float32, scores.device());
  MT_DISPATCH(scores.device(), masked_softmax_forward, xc, mask, scale, y);
  // Like softmax's, the gradient is a function of the output alone: masked keys have y = 0
  // and so get no gradient without the mask being kept.
  record("MaskedSoftmaxBackward", {scores}, {y}, [y = y.detach(), scale](const Grads& g, const Needs&) -> Grads {
    Tensor gy = g[0].contiguous();
    Tensor gx = Tensor::empty(y.shape(), DType::Float32, y.device());
    MT_DISPATCH(y.device(), masked_softmax_backward, y, gy, scale, gx);
    return {gx};
  });
  return y;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                 float dropout_p, bool training, Generator& gen) {
  for (const Tensor* t : {&q, &k, &v})
    MT_CHECK(t->dtype() == DType::Float32 && t->dim() == 4,
             "attention expects float32 q, k, v [batch, heads, seq, head_dim], got ", t->str());
  MT_CHECK(k.device() == q.device() && v.device() == q.device(), "attention: q ", q.str(), ", k ", k.str(),
           " and v ", v.str(), " must be on one device");
  const int64_t b = q.shape()[0], h = q.shape()[1], sq = q.shape()[2], dh = q.shape()[3];
  const int64_t sk = k.shape()[2], dv = v.shape()[3];
  MT_CHECK(k.shape()[0] == b && k.shape()[1] == h && k.shape()[3] == dh, "attention: k ", k.str(),
           " does not match q ", q.str(), " (same batch, heads and head_dim)");
  MT_CHECK(v.shape()[0] == b && v.shape()[1] == h && v.shape()[2] == sk, "attention: v ", v.str(),
           " does not match k ", k.str(), " (same batch, heads and keys)");
  MT_CHECK(dh > 0, "attention: head_dim must be positive, got ", q.str());
  // Batched over batch * heads. reshape is a view for contiguous inputs and a (differentiable)
  // copy for the usual [B, S, H, Dh] -> [B, H, S, Dh] transposed view; k^T stays a view, which
  // the batched GEMM reads as a transposed operand.
  const Tensor q3 = q.reshape({b * h, sq, dh}), k3 = k.reshape({b * h, sk, dh}), v3 = v.reshape({b * h, sk, dv});
  const Tensor scores = matmul(q3, k3.transpose(1, 2)).view({b, h, sq, sk});
  Tensor probs = masked_softmax(scores, key_mask, 1.0f / std::sqrt(static_cast<float>(dh)));
  probs = dropout(probs, dropout_p, training, gen);
  return matmul(probs.view({b * h, sq, sk}), v3).view({b, h, sq, dv});
}

}  // namespace mt::core
