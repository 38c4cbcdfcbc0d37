#include "layers/transformer_layer.h"

#include "core/ops/elementwise.h"
#include "core/ops/transformer.h"

namespace mt::layers {

TransformerLayer::TransformerLayer(const TransformerLayerOptions& opt, core::Generator& gen) : opt_(opt) {
  MT_CHECK(opt.intermediate > 0, "TransformerLayer: intermediate must be > 0, got ", opt.intermediate);
  MT_CHECK(opt.hidden_dropout >= 0.0f && opt.hidden_dropout < 1.0f,
           "TransformerLayer: hidden_dropout must be in [0, 1), got ", opt.hidden_dropout);
  attention_ = register_module("attention",
                               std::make_shared<MultiHeadAttention>(opt.hidden, opt.heads, opt.attention_dropout, gen));
  attention_output_dropout_ =
      register_module("attention_output_dropout", std::make_shared<Dropout>(opt.hidden_dropout, gen.next_u64()));
  attention_norm_ = register_module("attention_norm", std::make_shared<LayerNorm>(opt.hidden, opt.layer_norm_eps));
  intermediate_ = register_module("intermediate", std::make_shared<Linear>(opt.hidden, opt.intermediate, gen));
  output_ = register_module("output", std::make_shared<Linear>(opt.intermediate, opt.hidden, gen));
  ffn_output_dropout_ =
      register_module("ffn_output_dropout", std::make_shared<Dropout>(opt.hidden_dropout, gen.next_u64()));
  output_norm_ = register_module("output_norm", std::make_shared<LayerNorm>(opt.hidden, opt.layer_norm_eps));
}

Tensor TransformerLayer::forward(const Tensor& x, const Tensor& key_mask) {
  // The attention checks x first: [batch, seq, hidden], its hidden being ours.
  const Tensor attended = attention_output_dropout_->forward(attention_->forward(x, key_mask));
  const int64_t batch = x.size(0), seq = x.size(1);
  const Tensor h = attention_norm_->forward(x + attended);
  // The feed-forward network works token by token, so it runs on [B*S, hidden] rows.
  const Tensor ffn = output_->forward(core::gelu(intermediate_->forward(h.reshape({batch * seq, opt_.hidden}))));
  const Tensor dropped = ffn_output_dropout_->forward(ffn.view({batch, seq, opt_.hidden}));
  return output_norm_->forward(h + dropped);
}

}  // namespace mt::layers
