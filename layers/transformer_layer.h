// One BERT encoder layer, post-LN as in the original Transformer and BERT:
//
//   h = LayerNorm(x + Dropout(SelfAttention(x)))
//   y = LayerNorm(h + Dropout(Linear2(GELU(Linear1(h)))))
//
// Names follow BERT's layout: attention.{qkv,dense}, attention_norm, intermediate (hidden ->
// intermediate), output (intermediate -> hidden), output_norm.
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/dropout.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/multi_head_attention.h"

namespace mt::layers {

struct TransformerLayerOptions {
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  float hidden_dropout = 0.1f;     // on each sublayer's output, before the residual add
  float attention_dropout = 0.1f;  // on the attention probabilities
  float layer_norm_eps = 1e-12f;
};

class TransformerLayer : public Module {
 public:
  TransformerLayer(const TransformerLayerOptions& opt, core::Generator& gen);

  // x [B, S, hidden], key_mask float32 [B, S] or undefined (see MultiHeadAttention) -> [B, S, hidden].
  Tensor forward(const Tensor& x, const Tensor& key_mask);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  std::string type_name() const override { return "TransformerLayer"; }

  const TransformerLayerOptions& options() const { return opt_; }

 private:
  TransformerLayerOptions opt_;
  std::shared_ptr<MultiHeadAttention> attention_;
  std::shared_ptr<Dropout> attention_output_dropout_;
  std::shared_ptr<LayerNorm> attention_norm_;
  std::shared_ptr<Linear> intermediate_, output_;
  std::shared_ptr<Dropout> ffn_output_dropout_;
  std::shared_ptr<LayerNorm> output_norm_;
};

}  // namespace mt::layers
