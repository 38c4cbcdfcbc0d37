// Masked-language modelling (BERT pre-training): token sequences from a text corpus (WordPiece)
// or synthetic tokens, masked by the loader (data/mlm_loader.h); a BERT model sized to the
// vocabulary; cross-entropy over the masked positions only.
#pragma once
#include <memory>

#include "apps/task.h"
#include "data/text_data.h"

namespace mt::apps {

class MlmTask : public Task {
 public:
  MlmTask(const RunConfig& config, const TaskContext& context);

  data::BatchLoader* train_loader() override;
  data::BatchLoader& test_loader() override;
  std::string describe_train() const override;
  std::string describe_test() const override { return data_.describe_eval; }
  std::shared_ptr<layers::Module> build_model(core::Generator& gen) override;
  Prediction predict(layers::Module& model, const data::Batch& batch) override;
  const char* unit() const override { return "tok"; }
  const char* predictions_name() const override { return "masked tokens"; }

 private:
  RunConfig config_;
  core::Device device_;
  data::TextData data_;
};

}  // namespace mt::apps
