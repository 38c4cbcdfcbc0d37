// Linear (fully-connected) layer: y = x W^T + b, with W [out_features, in_features].
#pragma once
#include "core/random.h"
#include "layers/module.h"

namespace mt::layers {

class Linear : public Module {
 public:
  // Weights drawn with PyTorch's default init from gen (see init.h).
  Linear(int64_t in_features, int64_t out_features, core::Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;  // [N, in_features] -> [N, out_features]
  std::string type_name() const override { return "Linear"; }

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

}  // namespace mt::layers
