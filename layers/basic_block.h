// The residual block of ResNet-18/34 and of the CIFAR ResNets (He et al. 2016, "v1"):
//
//   out = relu( bn2(conv2( relu(bn1(conv1(x))) )) + shortcut(x) )
//
// conv1 is 3x3 with the block's stride, conv2 3x3 with stride 1, both without bias (the batch
// norm that follows has its own shift). The shortcut is the identity when shape is preserved,
// and a 1x1 convolution + batch norm projection ("downsample", as torchvision names it) when
// the stride or the channel count changes. The identity path is what lets gradients reach
// early layers of deep networks unattenuated.
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace mt::layers {

class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in, H, W] -> [N, out, H/stride, W/stride]
  std::string type_name() const override { return "BasicBlock"; }
  bool has_projection() const { return downsample_ != nullptr; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null for the identity shortcut
};

}  // namespace mt::layers
