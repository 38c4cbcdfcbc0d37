// BERT (Devlin et al. 2019) for masked-language-model pre-training.
//
//   BertEmbeddings   word + position + token-type embeddings -> LayerNorm -> Dropout
//   BertEncoder      embeddings, then `layers` post-LN TransformerLayers
//   BertForMaskedLM  the encoder plus the MLM head: Linear(hidden, hidden) -> GELU -> LayerNorm
//                    -> decoder onto the vocabulary, whose weight IS the word-embedding table
//                    (tied, as in BERT) and whose bias "decoder_bias" is its own
//
// The tied table is registered once, under bert.embeddings.word_embeddings.weight: it appears
// once in named_parameters(), so the optimizer and the gradient exchange handle it once, and
// its gradient is the sum of both uses (the lookup and the decoder).
//
// Inputs are single segments: position ids 0..S-1, token-type ids all 0 (the type table is
// kept so parameter names and shapes match BERT's checkpoints).
#pragma once
#include <memory>
#include <vector>

#include "core/random.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/sequential.h"
#include "layers/transformer_layer.h"

namespace mt::layers {

struct BertOptions {
  int64_t vocab_size = 0;  // from the data's tokenizer; must be set
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 0;  // 0 = 4 * hidden
  int64_t max_position = 512;
  int64_t type_vocab = 2;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float layer_norm_eps = 1e-12f;
  float init_std = 0.02f;  // truncated normal (at 2 std) for weights and embeddings

  int64_t intermediate_size() const { return intermediate > 0 ? intermediate : 4 * hidden; }
  void validate() const;  // Error naming the first bad field

  // Turc et al. (2019) sizes for tiny/mini/small; Devlin et al. for base.
  static BertOptions tiny(int64_t vocab_size);   // 2 layers, hidden 128, 2 heads
  static BertOptions mini(int64_t vocab_size);   // 4 layers, hidden 256, 4 heads
  static BertOptions small(int64_t vocab_size);  // 4 layers, hidden 512, 8 heads
  static BertOptions base(int64_t vocab_size);   // 12 layers, hidden 768, 12 heads
};

// Values from a run config laid over a preset: 0 (for the dropouts, a negative value) keeps
// the preset's value. intermediate 0 keeps 4 x the (possibly overridden) hidden size.
struct BertOverrides {
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t intermediate = 0;
  int64_t max_position = 0;
  int64_t type_vocab = 0;
  float hidden_dropout = -1.0f;
  float attention_dropout = -1.0f;
  float layer_norm_eps = 0.0f;
  float init_std = 0.0f;

  BertOptions applied_to(BertOptions preset) const;
};

class BertEmbeddings : public Module {
 public:
  BertEmbeddings(const BertOptions& opt, core::Generator& gen);
  Tensor forward(const Tensor& ids) override;  // int64 [B, S] -> [B, S, hidden]
  std::string type_name() const override { return "BertEmbeddings"; }
  const std::shared_ptr<Embedding>& word_embeddings() const { return word_; }

 private:
  std::shared_ptr<Embedding> word_, position_, token_type_;
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Dropout> dropout_;
};

class BertEncoder : public Module {
 public:
  BertEncoder(const BertOptions& opt, core::Generator& gen);
  // ids int64 [B, S] (S <= max_position); attention_mask float32 [B, S], 1 = token, 0 = padding,
  // undefined = no padding -> final hidden states [B, S, hidden].
  Tensor forward(const Tensor& ids, const Tensor& attention_mask);
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }
  std::string type_name() const override { return "BertEncoder"; }

  const BertOptions& options() const { return opt_; }
  const std::shared_ptr<BertEmbeddings>& embeddings() const { return embeddings_; }

 private:
  BertOptions opt_;
  std::shared_ptr<BertEmbeddings> embeddings_;
  std::vector<std::shared_ptr<TransformerLayer>> layers_;  // also registered, as "layers.<i>"
};

// The MLM head's transform and decoder bias; the decoder weight is the tied embedding table,
// held here but not registered.
class BertMlmHead : public Module {
 public:
  BertMlmHead(const BertOptions& opt, Tensor tied_decoder_weight, core::Generator& gen);
  Tensor forward(const Tensor& hidden) override;  // [N, hidden] -> logits [N, vocab]
  std::string type_name() const override { return "BertMlmHead"; }

 private:
  std::shared_ptr<Linear> dense_;
  std::shared_ptr<LayerNorm> norm_;
  Tensor decoder_weight_;  // tied: bert.embeddings.word_embeddings.weight
  Tensor decoder_bias_;
};

struct MlmOutput {
  core::Tensor loss;     // scalar: mean cross-entropy over the predicted positions
  core::Tensor logits;   // [M, vocab], the M predicted positions in row-major (b, s) order
  core::Tensor targets;  // int64 [M], their labels
};

class BertForMaskedLM : public Module {
 public:
  BertForMaskedLM(const BertOptions& opt, core::Generator& gen);

  // ids int64 [B, S]; attention_mask float32 [B, S] (1 token, 0 padding; undefined = all ones);
  // labels int64 [B, S], -100 where nothing is predicted. Only the predicted positions go
  // through the MLM head, so the vocabulary projection costs ~15% of a full one. A batch with
  // no predicted position gives loss 0 (zero gradients) and one dummy row whose target is -100.
  MlmOutput mlm(const Tensor& ids, const Tensor& attention_mask, const Tensor& labels);

  // MLM logits for every position, no padding mask: int64 [B, S] -> [B, S, vocab].
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return "BertForMaskedLM"; }

  const BertOptions& options() const { return opt_; }
  const std::shared_ptr<BertEncoder>& encoder() const { return bert_; }
  // The tied table (word embeddings = decoder weight).
  const Tensor& word_embedding_weight() const { return bert_->embeddings()->word_embeddings()->weight(); }

 private:
  BertOptions opt_;
  std::shared_ptr<BertEncoder> bert_;
  std::shared_ptr<BertMlmHead> head_;
};

}  // namespace mt::layers
