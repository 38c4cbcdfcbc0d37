// ResNet for ImageNet-sized images (He et al. 2016, table 1), with torchvision's layer names so
// that a state dict maps one to one onto torchvision's resnet18 / resnet50:
//
//   conv1 7x7/2 -> 64 ch -> bn1 -> relu -> maxpool 3x3/2      (224 -> 56)
//   layer1: blocks[0] x block, 64 wide                         (56x56)
//   layer2: blocks[1] x block, 128 wide, stride 2              (28x28)
//   layer3: blocks[2] x block, 256 wide, stride 2              (14x14)
//   layer4: blocks[3] x block, 512 wide, stride 2              (7x7)
//   global average pool ("avgpool") -> fc -> num_classes
//
// ResNet-18: BasicBlock, [2, 2, 2, 2], 11,689,512 parameters for 1000 classes.
// ResNet-50: Bottleneck (x4 expansion, stride on the 3x3), [3, 4, 6, 3], 25,557,032 parameters.
// The pooling is global, so any input of at least 32x32 works (the tests use 64x64).
// Init as torchvision: convolutions kaiming normal (fan_out, ReLU gain), BN weight 1 / bias 0.
#pragma once
#include <array>
#include <memory>

#include "core/random.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace mt::layers {

class ResNetImageNet : public Module {
 public:
  // depth: 18 or 50 (34, 101 and 152 would be one line each in the constructor's table).
  ResNetImageNet(int64_t depth, int64_t in_channels, int64_t num_classes, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> [N, num_classes]
  std::string type_name() const override { return "ResNet" + std::to_string(depth_); }

 private:
  int64_t depth_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::array<std::shared_ptr<Sequential>, 4> layers_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace mt::layers
