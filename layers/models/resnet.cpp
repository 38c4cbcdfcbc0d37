#include "layers/models/resnet.h"

#include "core/ops/nn.h"
#include "layers/basic_block.h"
#include "layers/init.h"

namespace mt::layers {

namespace {
std::shared_ptr<Sequential> make_stage(int64_t in, int64_t out, int64_t blocks, int64_t stride,
                                       core::Generator& gen) {
  auto stage = std::make_shared<Sequential>();
  for (int64_t b = 0; b < blocks; ++b)
    stage->push_back(std::make_shared<BasicBlock>(b == 0 ? in : out, out, b == 0 ? stride : 1, gen));
  return stage;
}
}  // namespace

ResNetCifar::ResNetCifar(int64_t depth, int64_t in_channels, int64_t num_classes, core::Generator& gen)
    : depth_(depth) {
  MT_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "ResNetCifar: depth must be 6n + 2 (20, 32, 56, ...), got ", depth);
  const int64_t n = (depth - 2) / 6;
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(Conv2dLayerOptions{in_channels, 16, 3, 1, 1, false}, gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(16));
  layer1_ = register_module("layer1", make_stage(16, 16, n, 1, gen));
  layer2_ = register_module("layer2", make_stage(16, 32, n, 2, gen));
  layer3_ = register_module("layer3", make_stage(32, 64, n, 2, gen));
  fc_ = register_module("fc", std::make_shared<Linear>(64, num_classes, gen));
  // torchvision's ResNet init: the convolutions get kaiming normal (fan_out) in place of the
  // default uniform init they were built with; BN stays at weight 1, bias 0; fc keeps the
  // default. Redrawing costs a few more random numbers but keeps layer constructors simple.
  for (const auto& [name, p] : named_parameters())
    if (p.dim() == 4) kaiming_normal_(p, gen);
}

Tensor ResNetCifar::forward(const Tensor& x) {
  Tensor h = bn1_->forward_relu(conv1_->forward(x));
  h = layer3_->forward(layer2_->forward(layer1_->forward(h)));
  return fc_->forward(core::global_avg_pool2d(h));
}

}  // namespace mt::layers
