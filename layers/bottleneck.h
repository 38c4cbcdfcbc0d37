// The bottleneck residual block of ResNet-50/101/152 (He et al. 2016, "v1.5" as in torchvision):
//
//   out = relu( bn3(conv3( relu(bn2(conv2( relu(bn1(conv1(x))) ))) )) + shortcut(x) )
//
// conv1 1x1 reduces to `width` channels, conv2 3x3 carries the block's stride, conv3 1x1
// expands to width * 4 (kExpansion). Putting the stride on the 3x3 convolution rather than on
// conv1 (the paper's "v1") is torchvision's choice: it costs a little compute and gains about
// half a point of ImageNet accuracy, and it keeps our parameter names and shapes loadable from
// torchvision's weights. The shortcut is the identity when the shape is preserved, otherwise a
// 1x1 convolution + batch norm projection named "downsample".
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/batch_norm2d.h"
#include "layers/conv2d.h"
#include "layers/module.h"
#include "layers/sequential.h"

namespace mt::layers {

class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  // Output channels are width * kExpansion.
  Bottleneck(int64_t in_channels, int64_t width, int64_t stride, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in, H, W] -> [N, 4 width, H/stride, W/stride]
  std::string type_name() const override { return "Bottleneck"; }
  bool has_projection() const { return downsample_ != nullptr; }

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<Sequential> downsample_;  // null for the identity shortcut
};

}  // namespace mt::layers
