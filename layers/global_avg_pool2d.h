// Global average pooling: the mean of each channel over all positions, [N, C, H, W] -> [N, C].
// It lets a convolutional network end in a classifier whatever the input's spatial size.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GlobalAvgPool2d"; }
};

}  // namespace mt::layers
