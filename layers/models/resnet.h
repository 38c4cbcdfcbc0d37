// ResNet for 32x32 images (He et al. 2016, section 4.2): depth 6n + 2.
//
//   conv1 3x3 -> 16 ch -> bn1 -> relu
//   layer1: n BasicBlocks, 16 ch            (32x32)
//   layer2: n BasicBlocks, 32 ch, stride 2  (16x16)
//   layer3: n BasicBlocks, 64 ch, stride 2  (8x8)
//   global average pool -> fc -> num_classes
//
// n = 3, 5, 9 give ResNet-20, -32, -56. The first block of layer2 and layer3 uses a 1x1
// convolution + batch norm projection shortcut (option B of the paper; the original CIFAR
// models used zero-padded identity, option A, which has no parameters), so ResNet-20 has
// 272,474 parameters for 3-channel input rather than the paper's 0.27M rounded figure.
// Convolutions are initialized like torchvision: kaiming normal, fan_out, ReLU gain.
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace mt::layers {

class ResNetCifar : public Module {
 public:
  // depth must be 6n + 2 (20, 32, 44, 56, 110, ...).
  ResNetCifar(int64_t depth, int64_t in_channels, int64_t num_classes, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> [N, num_classes]
  std::string type_name() const override { return "ResNet" + std::to_string(depth_); }

 private:
  int64_t depth_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<Sequential> layer1_, layer2_, layer3_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace mt::layers
