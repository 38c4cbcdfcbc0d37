// Flatten: merges dimensions start_dim.. into one, e.g. [N, C, H, W] -> [N, C*H*W], the bridge
// from convolutional features to fully-connected layers.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim_); }
  std::string type_name() const override { return "Flatten"; }

 private:
  int64_t start_dim_;
};

}  // namespace mt::layers
