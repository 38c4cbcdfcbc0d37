#include "layers/models/bert.h"

#include <cmath>
#include <numbers>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/transformer.h"
#include "layers/init.h"

namespace mt::layers {

namespace {

constexpr int64_t kIgnoreLabel = -100;

// N(0, stddev) with every draw beyond 2 stddev redrawn, BERT's weight init: no weight starts
// far out in the tail. Drawn on the CPU, in element order, so a seed fixes the result.
void truncated_normal_(const Tensor& t, double stddev, core::Generator& gen) {
  Tensor draw = core::randn(t.shape(), 0.0f, static_cast<float>(stddev), gen);
  float* d = draw.data<float>();
  const double bound = 2.0 * stddev;
  for (int64_t i = 0; i < draw.numel(); ++i) {
    while (std::fabs(d[i]) > bound) {
      // Box-Muller; 1 - uniform() lies in (0, 1], so the log is finite.
      const double u1 = 1.0 - gen.uniform(), u2 = gen.uniform();
      d[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
    }
  }
  core::NoGradGuard no_grad;
  Tensor(t).copy_(draw);
}

TransformerLayerOptions layer_options(const BertOptions& opt) {
  TransformerLayerOptions l;
  l.hidden = opt.hidden;
  l.heads = opt.heads;
  l.intermediate = opt.intermediate_size();
  l.hidden_dropout = opt.hidden_dropout;
  l.attention_dropout = opt.attention_dropout;
  l.layer_norm_eps = opt.layer_norm_eps;
  return l;
}

void check_ids(const Tensor& ids, const BertOptions& opt, const char* who) {
  MT_CHECK(ids.defined() && ids.dtype() == core::DType::Int64 && ids.dim() == 2, who,
           ": expected int64 token ids [batch, seq], got ", ids.defined() ? ids.str() : "an undefined tensor");
  MT_CHECK(ids.size(1) >= 1 && ids.size(1) <= opt.max_position, who, ": sequence length ", ids.size(1),
           " is outside [1, max_position = ", opt.max_position, "]; shorten the sequences or raise max_position");
}

BertOptions preset(int64_t vocab_size, int64_t layers, int64_t hidden, int64_t heads) {
  BertOptions o;
  o.vocab_size = vocab_size;
  o.layers = layers;
  o.hidden = hidden;
  o.heads = heads;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Options

void BertOptions::validate() const {
  MT_CHECK(vocab_size > 0, "BERT: vocab_size must be > 0, got ", vocab_size,
           "; the data must supply a vocabulary (a tokenizer's or the synthetic token count)");
  MT_CHECK(hidden > 0 && layers > 0 && heads > 0, "BERT: hidden, layers and heads must be > 0, got ", hidden, ", ",
           layers, ", ", heads);
  MT_CHECK(hidden % heads == 0, "BERT: hidden (", hidden, ") must be divisible by heads (", heads, ")");
  MT_CHECK(intermediate >= 0, "BERT: intermediate must be >= 0 (0 = 4 x hidden), got ", intermediate);
  MT_CHECK(max_position > 0 && type_vocab > 0, "BERT: max_position and type_vocab must be > 0, got ", max_position,
           " and ", type_vocab);
  MT_CHECK(hidden_dropout >= 0.0f && hidden_dropout < 1.0f && attention_dropout >= 0.0f && attention_dropout < 1.0f,
           "BERT: hidden_dropout and attention_dropout must be in [0, 1), got ", hidden_dropout, " and ",
           attention_dropout);
  MT_CHECK(layer_norm_eps > 0.0f, "BERT: layer_norm_eps must be > 0, got ", layer_norm_eps);
  MT_CHECK(init_std > 0.0f, "BERT: init_std must be > 0, got ", init_std);
}

BertOptions BertOptions::tiny(int64_t vocab_size) { return preset(vocab_size, 2, 128, 2); }
BertOptions BertOptions::mini(int64_t vocab_size) { return preset(vocab_size, 4, 256, 4); }
BertOptions BertOptions::small(int64_t vocab_size) { return preset(vocab_size, 4, 512, 8); }
BertOptions BertOptions::base(int64_t vocab_size) { return preset(vocab_size, 12, 768, 12); }

BertOptions BertOverrides::applied_to(BertOptions o) const {
  if (hidden > 0) o.hidden = hidden;
  if (layers > 0) o.layers = layers;
  if (heads > 0) o.heads = heads;
  if (intermediate > 0) o.intermediate = intermediate;
  if (max_position > 0) o.max_position = max_position;
  if (type_vocab > 0) o.type_vocab = type_vocab;
  if (hidden_dropout >= 0.0f) o.hidden_dropout = hidden_dropout;
  if (attention_dropout >= 0.0f) o.attention_dropout = attention_dropout;
  if (layer_norm_eps > 0.0f) o.layer_norm_eps = layer_norm_eps;
  if (init_std > 0.0f) o.init_std = init_std;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Embeddings and encoder

BertEmbeddings::BertEmbeddings(const BertOptions& opt, core::Generator& gen) {
  word_ = register_module("word_embeddings", std::make_shared<Embedding>(opt.vocab_size, opt.hidden, opt.init_std, gen));
  position_ = register_module("position_embeddings",
                              std::make_shared<Embedding>(opt.max_position, opt.hidden, opt.init_std, gen));
  token_type_ = register_module("token_type_embeddings",
                                std::make_shared<Embedding>(opt.type_vocab, opt.hidden, opt.init_std, gen));
  norm_ = register_module("layer_norm", std::make_shared<LayerNorm>(opt.hidden, opt.layer_norm_eps));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(opt.hidden_dropout, gen.next_u64()));
}

// BertEncoder::forward, the only caller, has checked the ids (check_ids).
Tensor BertEmbeddings::forward(const Tensor& ids) {
  const int64_t seq = ids.size(1);
  // Positions 0..S-1 and token type 0 are the same for every sequence: slices of the tables
  // (no gather), summed once into [S, hidden] and broadcast over the batch in one add.
  const Tensor position_and_type =
      position_->weight().narrow(0, 0, seq) + token_type_->weight().narrow(0, 0, 1);
  return dropout_->forward(norm_->forward(word_->forward(ids) + position_and_type));
}

BertEncoder::BertEncoder(const BertOptions& opt, core::Generator& gen) : opt_(opt) {
  opt.validate();
  embeddings_ = register_module("embeddings", std::make_shared<BertEmbeddings>(opt, gen));
  // A Sequential only as a named container ("layers.0", "layers.1", ...): forward passes the
  // mask, which Sequential's one-tensor forward cannot.
  auto stack = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < opt.layers; ++i)
    layers_.push_back(stack->push_back(std::make_shared<TransformerLayer>(layer_options(opt), gen)));
}

Tensor BertEncoder::forward(const Tensor& ids, const Tensor& attention_mask) {
  check_ids(ids, opt_, "BertEncoder");
  if (attention_mask.defined()) {
    MT_CHECK(attention_mask.dtype() == core::DType::Float32 && attention_mask.shape() == ids.shape(),
             "BertEncoder: attention_mask must be float32 [batch, seq] like the ids ", ids.str(),
             " (1 = token, 0 = padding), got ", attention_mask.str());
    MT_CHECK(attention_mask.device() == ids.device(), "BertEncoder: attention_mask ", attention_mask.str(),
             " is on another device than the ids ", ids.str());
  }
  Tensor h = embeddings_->forward(ids);
  for (const auto& layer : layers_) h = layer->forward(h, attention_mask);
  return h;
}

// ---------------------------------------------------------------------------------------------
// MLM head and model

BertMlmHead::BertMlmHead(const BertOptions& opt, Tensor tied_decoder_weight, core::Generator& gen)
    : decoder_weight_(std::move(tied_decoder_weight)) {
  MT_CHECK(decoder_weight_.defined() && decoder_weight_.dim() == 2 && decoder_weight_.size(1) == opt.hidden,
           "BertMlmHead: the tied decoder weight must be [vocab, ", opt.hidden, "]");
  dense_ = register_module("dense", std::make_shared<Linear>(opt.hidden, opt.hidden, gen));
  norm_ = register_module("layer_norm", std::make_shared<LayerNorm>(opt.hidden, opt.layer_norm_eps));
  decoder_bias_ = register_parameter("decoder_bias", Tensor::zeros({decoder_weight_.size(0)}));
}

Tensor BertMlmHead::forward(const Tensor& hidden) {
  run_forward_pre_hooks();
  const Tensor h = norm_->forward(core::gelu(dense_->forward(hidden)));
  return core::linear(h, decoder_weight_, decoder_bias_);
}

BertForMaskedLM::BertForMaskedLM(const BertOptions& opt, core::Generator& gen) : opt_(opt) {
  bert_ = register_module("bert", std::make_shared<BertEncoder>(opt, gen));
  head_ = register_module("mlm_head", std::make_shared<BertMlmHead>(opt, word_embedding_weight(), gen));
  // BERT's init in place of the layers' defaults: truncated normal for every matrix (Linear
  // weights and embedding tables), zero biases; layer norms stay at ones and zeros. Redrawing
  // costs random numbers, not complexity in the layer constructors.
  for (const auto& [name, p] : named_parameters()) {
    if (p.dim() == 2) truncated_normal_(p, opt.init_std, gen);
    else if (name.ends_with("bias")) constant_(p, 0.0);
  }
}

MlmOutput BertForMaskedLM::mlm(const Tensor& ids, const Tensor& attention_mask, const Tensor& labels) {
  check_ids(ids, opt_, "BertForMaskedLM::mlm");
  MT_CHECK(labels.defined() && labels.dtype() == core::DType::Int64 && labels.shape() == ids.shape(),
           "BertForMaskedLM::mlm: labels must be int64 like the ids ", ids.str(), " (-100 = not predicted), got ",
           labels.defined() ? labels.str() : "an undefined tensor");
  const Tensor hidden = bert_->forward(ids, attention_mask);
  const int64_t rows = ids.size(0) * ids.size(1);

  // The predicted positions are chosen on the host (a GPU batch's labels come back once, small).
  const Tensor host_labels = labels.to(core::Device::cpu()).contiguous();
  const int64_t* label = host_labels.data<int64_t>();
  std::vector<int64_t> positions, targets;
  positions.reserve(static_cast<size_t>(rows / 4));
  targets.reserve(static_cast<size_t>(rows / 4));
  for (int64_t i = 0; i < rows; ++i) {
    if (label[i] == kIgnoreLabel) continue;
    positions.push_back(i);
    targets.push_back(label[i]);
  }
  // Nothing to predict: one ignored row keeps the graph whole and makes the loss an exact 0.
  if (positions.empty()) {
    positions.push_back(0);
    targets.push_back(kIgnoreLabel);
  }
  const int64_t m = static_cast<int64_t>(positions.size());
  const Tensor picked_rows = Tensor::from_vector(positions, {m}).to(ids.device());
  MlmOutput out;
  out.targets = Tensor::from_vector(targets, {m}).to(ids.device());
  // Gather before the head: the vocabulary projection, the largest GEMM of a small BERT, then
  // runs on the ~15% of tokens that are predicted.
  const Tensor picked = core::embedding(hidden.reshape({rows, opt_.hidden}), picked_rows);
  out.logits = head_->forward(picked);
  out.loss = core::cross_entropy_ignore(out.logits, out.targets, kIgnoreLabel);
  return out;
}

Tensor BertForMaskedLM::forward(const Tensor& ids) {
  check_ids(ids, opt_, "BertForMaskedLM");
  const Tensor hidden = bert_->forward(ids, Tensor());
  const int64_t batch = ids.size(0), seq = ids.size(1);
  return head_->forward(hidden.reshape({batch * seq, opt_.hidden})).view({batch, seq, opt_.vocab_size});
}

}  // namespace mt::layers
