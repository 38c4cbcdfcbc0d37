#include "apps/mlm_task.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "layers/models/bert.h"
#include "layers/models/registry.h"

namespace mt::apps {
namespace {

data::TextDataOptions text_options(const RunConfig& config) {
  const auto& t = config.data().text();
  data::TextDataOptions o;
  o.type = config.data().type();
  o.corpus.assign(t.corpus().begin(), t.corpus().end());
  o.vocab_file = t.vocab_file();
  o.vocab_size = t.vocab_size();
  if (t.has_lowercase()) o.lowercase = t.lowercase();
  o.seq_len = t.seq_len();
  o.mask_prob = t.mask_prob();
  o.eval_fraction = t.eval_fraction();
  o.synthetic_sequences = t.synthetic_sequences();
  o.synthetic_vocab = t.synthetic_vocab();
  return o;
}

// The config's BERT sizes over the named preset: only fields the config sets override it.
layers::BertOverrides bert_overrides(const mintrain::BertConfig& b) {
  layers::BertOverrides o;
  if (b.has_hidden()) o.hidden = b.hidden();
  if (b.has_layers()) o.layers = b.layers();
  if (b.has_heads()) o.heads = b.heads();
  if (b.has_intermediate()) o.intermediate = b.intermediate();
  if (b.has_max_position()) o.max_position = b.max_position();
  if (b.has_type_vocab()) o.type_vocab = b.type_vocab();
  if (b.has_hidden_dropout()) o.hidden_dropout = b.hidden_dropout();
  if (b.has_attention_dropout()) o.attention_dropout = b.attention_dropout();
  if (b.has_layer_norm_eps()) o.layer_norm_eps = b.layer_norm_eps();
  if (b.has_init_std()) o.init_std = b.init_std();
  return o;
}

}  // namespace

MlmTask::MlmTask(const RunConfig& config, const TaskContext& context)
    : config_(config), device_(context.device) {
  const auto& dc = config_.data();
  data::TextLoaderSettings s;
  s.batch_size = dc.batch_size();
  s.eval_batch_size = dc.eval_batch_size();
  s.shuffle = dc.shuffle();
  s.drop_last = dc.drop_last();
  s.prefetch_batches = std::max(1, dc.prefetch_batches());
  s.seed = config_.seed();
  s.rank = context.rank;
  s.world_size = context.world_size;
  s.build_train = !context.eval_only;
  data_ = data::build_text_data(text_options(config_), s, context.output_dir);
  MT_CHECK(data_.eval != nullptr, "the masked-language-model run has no evaluation data; set "
           "data.text.eval_fraction above 0");
}

std::string MlmTask::describe_train() const {
  std::string s = data_.describe_train + "; vocabulary " + data_.vocab_source;
  if (data_.corpus_tokens > 0)
    s += core::formatted(", %.2f%% [UNK]", 100.0 * data_.unknown_tokens / data_.corpus_tokens);
  return s;
}

data::BatchLoader* MlmTask::train_loader() { return data_.train.get(); }
data::BatchLoader& MlmTask::test_loader() { return *data_.eval; }

std::shared_ptr<layers::Module> MlmTask::build_model(core::Generator& gen) {
  layers::ModelOptions mopt;
  mopt.vocab_size = data_.vocab_size;
  mopt.bert = bert_overrides(config_.model().bert());
  return layers::build_model(config_.model().name(), mopt, gen);
}

Prediction MlmTask::predict(layers::Module& model, const data::Batch& batch) {
  auto* bert = dynamic_cast<layers::BertForMaskedLM*>(&model);
  MT_CHECK(bert != nullptr, "the masked-language-model task needs a BERT model, got ", model.type_name());
  const core::Tensor ids = batch.inputs.to(device_), mask = batch.mask.to(device_),
                     labels = batch.targets.to(device_);
  const layers::MlmOutput out = bert->mlm(ids, mask, labels);
  return {out.loss, out.logits, out.targets};
}

}  // namespace mt::apps
