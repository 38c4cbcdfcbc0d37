// Task: what a run trains the model to do. The training loop (schedule, synchronizer, gradient
// accumulation, checkpoints, progress, evaluation) is the same for every task; a task supplies
// the data loaders, builds the model that fits its data, and turns one batch into a loss plus
// the counts that progress lines and evaluation report.
//
//   image classification  image datasets (data/registry.h), any image model; loss: cross-entropy
//                         over the batch; counts images; "acc" is top-1 accuracy
//   masked language model data.type "text" or "synthetic_tokens", BERT models; loss:
//                         cross-entropy over the masked positions; counts tokens; "acc" is the
//                         accuracy of the masked-token predictions
//
// make_task() picks the task from data.type and checks that the model fits it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "apps/config.h"
#include "core/device.h"
#include "core/random.h"
#include "data/batch_loader.h"
#include "layers/module.h"

namespace mt::apps {

struct TaskContext {
  int rank = 0;  // this process's shard of the data
  int world_size = 1;
  core::Device device = core::Device::cpu();  // where batches are delivered
  std::string output_dir;                      // for files a task writes (a built vocabulary)
  bool eval_only = false;                      // no training data
};

// One batch's forward pass, left on the device: the loss (in training it carries the graph for
// backward()) and the predictions it averages over.
struct Prediction {
  core::Tensor loss;     // scalar: mean over the predictions
  core::Tensor logits;   // [N, K]: one row per prediction (images, or masked tokens)
  core::Tensor targets;  // int64 [N]; negative = ignored
};

// One batch's result. In training `loss` carries the graph for backward().
struct BatchResult {
  core::Tensor loss;        // scalar: mean over the batch's predictions
  int64_t predictions = 0;  // what the loss averages over: images, or masked tokens
  int64_t correct = 0;      // of those, predicted right (top-1)
  int64_t units = 0;        // what throughput counts: images, or real (non-padding) tokens
};

class Task {
 public:
  virtual ~Task() = default;
  virtual data::BatchLoader* train_loader() = 0;  // null when built for evaluation only
  virtual data::BatchLoader& test_loader() = 0;
  virtual std::string describe_train() const = 0;  // "fashion-mnist train (60000 images) from ..."
  virtual std::string describe_test() const = 0;
  // The model named by config.model, sized for this task's data.
  virtual std::shared_ptr<layers::Module> build_model(core::Generator& gen) = 0;
  // Forward pass and loss of one batch (on the model's device), reading nothing back to the
  // host beyond what the model itself needs: what a training step computes (bench_train times
  // steps built on it).
  virtual Prediction predict(layers::Module& model, const data::Batch& batch) = 0;
  // predict() plus the counts the progress lines and evaluation report (read on the host):
  // units are the batch's real tokens where it has a padding mask, else its predictions.
  BatchResult run(layers::Module& model, const data::Batch& batch);
  // Throughput unit of the progress line: "img" or "tok".
  virtual const char* unit() const = 0;
  // What the loss and accuracy average over, plural: "images" or "masked tokens".
  virtual const char* predictions_name() const = 0;
};

std::unique_ptr<Task> make_task(const RunConfig& config, const TaskContext& context);

// Rows of logits [N, K] whose argmax equals the int64 target [N]; negative targets (ignored
// positions) never count. On the host: one small copy from a GPU.
// data.type values that make_task() accepts: the image datasets and the token datasets.
std::vector<std::string> data_types();
bool is_token_data(const std::string& data_type);

}  // namespace mt::apps
