// Max pooling: the largest value of each kernel x kernel window; padding counts as -inf.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class MaxPool2d : public Module {
 public:
  // stride defaults to the kernel size (non-overlapping windows), as in PyTorch.
  explicit MaxPool2d(int64_t kernel, int64_t stride = -1, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C, Ho, Wo]
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  int64_t kernel_, stride_, padding_;
};

}  // namespace mt::layers
