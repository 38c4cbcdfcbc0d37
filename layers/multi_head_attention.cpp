#include "layers/multi_head_attention.h"

#include <array>

#include "core/function_node.h"
#include "core/grad_mode.h"
#include "core/ops/transformer.h"

namespace mt::layers {

namespace {

// The fused projection [B*S, 3*D] (columns: query heads, key heads, value heads) as three
// contiguous [B, H, S, Dh] tensors, the layout the batched attention GEMMs read directly.
// One node for all three: its backward writes each head gradient straight into its slot of a
// single [B*S, 3*D] buffer. Three select() views would instead each allocate and zero a
// full-size [B*S, 3*D] gradient and the engine would add the three up, several extra passes
// over the largest activation of the layer.
std::array<Tensor, 3> split_heads(const Tensor& qkv, int64_t batch, int64_t seq, int64_t heads) {
  const int64_t head_dim = qkv.size(1) / (3 * heads);
  const core::Device device = qkv.device();
  std::array<Tensor, 3> out;
  {
    core::NoGradGuard no_grad;  // the views below are read once; the node below is the record
    const Tensor parts = qkv.detach().view({batch, seq, 3, heads, head_dim});
    for (int64_t i = 0; i < 3; ++i) {
      out[i] = Tensor::empty({batch, heads, seq, head_dim}, core::DType::Float32, device);
      out[i].copy_(parts.select(2, i).transpose(1, 2));
    }
  }
  core::record("SplitHeadsBackward", {qkv}, {out[0], out[1], out[2]},
               [batch, seq, heads, head_dim, device](const core::Grads& g, const core::Needs&) -> core::Grads {
                 const bool all = g[0].defined() && g[1].defined() && g[2].defined();
                 const core::Shape shape = {batch, seq, 3, heads, head_dim};
                 Tensor grad = all ? Tensor::empty(shape, core::DType::Float32, device)
                                   : Tensor::zeros(shape, core::DType::Float32, device);
                 for (int64_t i = 0; i < 3; ++i) {
                   if (!g[i].defined()) continue;
                   Tensor slot = grad.select(2, i).transpose(1, 2);
                   slot.copy_(g[i]);
                 }
                 return {grad.view({batch * seq, 3 * heads * head_dim})};
               });
  return out;
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t hidden, int64_t heads, float attention_dropout, core::Generator& gen)
    : hidden_(hidden), heads_(heads), attention_dropout_(attention_dropout) {
  MT_CHECK(hidden > 0 && heads > 0 && hidden % heads == 0, "MultiHeadAttention: hidden (", hidden,
           ") must be a positive multiple of heads (", heads, ")");
  MT_CHECK(attention_dropout >= 0.0f && attention_dropout < 1.0f,
           "MultiHeadAttention: attention_dropout must be in [0, 1), got ", attention_dropout);
  qkv_ = register_module("qkv", std::make_shared<Linear>(hidden, 3 * hidden, gen));
  dense_ = register_module("dense", std::make_shared<Linear>(hidden, hidden, gen));
  dropout_gen_ = core::Generator(gen.next_u64());
}

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor& key_mask) {
  MT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == hidden_, "MultiHeadAttention(hidden ", hidden_,
           "): expected input [batch, seq, ", hidden_, "], got ", x.defined() ? x.str() : "an undefined tensor");
  const int64_t batch = x.size(0), seq = x.size(1);
  if (key_mask.defined())
    MT_CHECK(key_mask.dim() == 2 && key_mask.size(0) == batch && key_mask.size(1) == seq,
             "MultiHeadAttention: key_mask must be [batch, seq] = [", batch, ", ", seq, "], got ", key_mask.str());
  const Tensor projected = qkv_->forward(x.reshape({batch * seq, hidden_}));
  const auto [q, k, v] = split_heads(projected, batch, seq, heads_);
  const Tensor context = core::attention(q, k, v, key_mask, attention_dropout_, is_training(), dropout_gen_);
  // [B, H, S, Dh] -> [B, S, H, Dh] -> [B*S, D]: one copy that puts each token's heads side by side.
  const Tensor merged = context.transpose(1, 2).reshape({batch * seq, hidden_});
  return dense_->forward(merged).view({batch, seq, hidden_});
}

}  // namespace mt::layers
