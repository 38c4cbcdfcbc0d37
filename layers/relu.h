// ReLU activation, max(x, 0), as a module so it can sit in a Sequential.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

}  // namespace mt::layers
