// Image classification: an image dataset from the data registry, a model from the model
// registry sized to its images and classes, cross-entropy over the batch.
#pragma once
#include <memory>

#include "apps/task.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace mt::apps {

class ImageClassificationTask : public Task {
 public:
  ImageClassificationTask(const RunConfig& config, const TaskContext& context);

  data::BatchLoader* train_loader() override { return train_loader_.get(); }
  data::BatchLoader& test_loader() override { return *test_loader_; }
  std::string describe_train() const override { return train_set_ ? train_set_->describe() : ""; }
  std::string describe_test() const override { return test_set_->describe(); }
  std::shared_ptr<layers::Module> build_model(core::Generator& gen) override;
  Prediction predict(layers::Module& model, const data::Batch& batch) override;
  const char* unit() const override { return "img"; }
  const char* predictions_name() const override { return "images"; }

 private:
  RunConfig config_;
  core::Device device_;
  std::shared_ptr<data::Dataset> train_set_, test_set_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
};

}  // namespace mt::apps
