#include "apps/task.h"

#include "apps/image_classification_task.h"
#include "apps/mlm_task.h"
#include "core/error.h"
#include "core/ops/reduction.h"
#include "data/registry.h"

namespace mt::apps {

bool is_token_data(const std::string& data_type) {
  return data_type == "text" || data_type == "synthetic_tokens";
}

std::vector<std::string> data_types() {
  std::vector<std::string> types = data::dataset_types();
  types.insert(types.end(), {"text", "synthetic_tokens"});
  return types;
}

BatchResult Task::run(layers::Module& model, const data::Batch& batch) {
  const Prediction p = predict(model, batch);
  const core::Tensor pred = core::argmax(p.logits.detach(), 1).to(core::Device::cpu()).contiguous();
  const core::Tensor t = p.targets.to(core::Device::cpu()).contiguous();
  const int64_t* guess = pred.data<int64_t>();
  const int64_t* y = t.data<int64_t>();
  BatchResult r;
  r.loss = p.loss;
  for (int64_t i = 0; i < t.numel(); ++i) {
    r.predictions += y[i] >= 0;
    r.correct += y[i] >= 0 && guess[i] == y[i];
  }
  // The mask's ones, summed on the host copy the loader made.
  r.units = batch.mask.defined() ? static_cast<int64_t>(core::sum(batch.mask.to(core::Device::cpu())).item() + 0.5)
                                 : r.predictions;
  return r;
}

std::unique_ptr<Task> make_task(const RunConfig& config, const TaskContext& context) {
  const bool bert = config.model().name().rfind("bert", 0) == 0;
  if (is_token_data(config.data().type())) {
    MT_CHECK(bert, "data.type \"", config.data().type(), "\" is token data for masked-language-model "
             "training, but model.name is \"", config.model().name(),
             "\"; use a BERT model (bert_tiny, bert_mini, bert_small, bert_base)");
    return std::make_unique<MlmTask>(config, context);
  }
  MT_CHECK(!bert, "model \"", config.model().name(), "\" trains on token data, but data.type is \"",
           config.data().type(), "\" (images); set data.type: \"text\" or \"synthetic_tokens\"");
  return std::make_unique<ImageClassificationTask>(config, context);
}

}  // namespace mt::apps
