// Multi-layer perceptron: flatten the image, then Linear -> ReLU (-> Dropout) per hidden size,
// then a Linear classifier. Parameters are fc1, fc2, ..., the last one the classifier.
#pragma once
#include <memory>
#include <vector>

#include "core/random.h"
#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace mt::layers {

class MLP : public Module {
 public:
  MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t num_classes, float dropout,
      core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, ...] -> [N, num_classes]
  std::string type_name() const override { return "MLP"; }

 private:
  std::vector<std::shared_ptr<Linear>> fcs_;
  std::vector<std::shared_ptr<Dropout>> drops_;  // one per hidden layer, or none
};

}  // namespace mt::layers
