// Average pooling: the mean of each kernel x kernel window; padding is excluded from the mean.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class AvgPool2d : public Module {
 public:
  // stride defaults to the kernel size (non-overlapping windows), as in PyTorch.
  explicit AvgPool2d(int64_t kernel, int64_t stride = -1, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C, Ho, Wo]
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  int64_t kernel_, stride_, padding_;
};

}  // namespace mt::layers
