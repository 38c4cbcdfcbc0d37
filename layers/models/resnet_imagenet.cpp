#include "layers/models/resnet_imagenet.h"

#include "core/ops/nn.h"
#include "layers/basic_block.h"
#include "layers/bottleneck.h"
#include "layers/init.h"

namespace mt::layers {

ResNetImageNet::ResNetImageNet(int64_t depth, int64_t in_channels, int64_t num_classes,
                               core::Generator& gen)
    : depth_(depth) {
  MT_CHECK(depth == 18 || depth == 50, "ResNetImageNet: depth must be 18 or 50, got ", depth);
  const bool bottleneck = depth == 50;
  const std::array<int64_t, 4> blocks = bottleneck ? std::array<int64_t, 4>{3, 4, 6, 3}
                                                   : std::array<int64_t, 4>{2, 2, 2, 2};
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : 1;

  conv1_ = register_module("conv1", std::make_shared<Conv2d>(
                                        Conv2dLayerOptions{in_channels, 64, 7, 2, 3, false}, gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  int64_t in = 64;
  for (int s = 0; s < 4; ++s) {
    const int64_t width = int64_t(64) << s;
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (b == 0 && s > 0) ? 2 : 1;
      if (bottleneck)
        stage->push_back(std::make_shared<Bottleneck>(in, width, stride, gen));
      else
        stage->push_back(std::make_shared<BasicBlock>(in, width, stride, gen));
      in = width * expansion;
    }
    layers_[s] = register_module("layer" + std::to_string(s + 1), stage);
  }
  fc_ = register_module("fc", std::make_shared<Linear>(in, num_classes, gen));
  // As in ResNetCifar: redraw the convolutions with torchvision's kaiming normal (fan_out).
  for (const auto& [name, p] : named_parameters())
    if (p.dim() == 4) kaiming_normal_(p, gen);
}

Tensor ResNetImageNet::forward(const Tensor& x) {
  Tensor h = bn1_->forward_relu(conv1_->forward(x));
  h = core::max_pool2d(h, 3, 2, 1);  // torchvision's "maxpool" (no parameters)
  for (const auto& stage : layers_) h = stage->forward(h);
  return fc_->forward(core::global_avg_pool2d(h));  // "avgpool" + "fc"
}

}  // namespace mt::layers
