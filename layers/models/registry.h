// Models by name, so a run config can say model: "resnet20" and the trainer need not know the
// classes. Every model is built from a Generator: the same seed gives the same weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "layers/models/bert.h"
#include "layers/module.h"

namespace mt::layers {

struct ModelOptions {
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  int64_t image_size = 28;                // square images: image_size x image_size
  std::vector<int64_t> hidden = {256, 128};  // MLP only
  float dropout = 0.0f;                   // MLP only
  // BERT only: the vocabulary comes from the data (its tokenizer); 0 = not supplied, an error
  // for a BERT model. `bert` lays the run config's sizes over the named preset.
  int64_t vocab_size = 0;
  BertOverrides bert;
};

// "mlp", "lenet5", "resnet20", "resnet32", "resnet56" (32x32 images), "resnet18", "resnet50"
// (ImageNet-sized images), "bert_tiny", "bert_mini", "bert_small", "bert_base" (BertForMaskedLM,
// token ids in; see bert.h); an unknown name is an Error that lists the valid ones.
std::shared_ptr<Module> build_model(const std::string& name, const ModelOptions& opt, core::Generator& gen);
std::vector<std::string> model_names();

}  // namespace mt::layers
