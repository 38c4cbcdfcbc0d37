#include "layers/basic_block.h"

#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "layers/residual.h"

namespace mt::layers {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, core::Generator& gen) {
  conv1_ = register_module("conv1",
      std::make_shared<Conv2d>(conv_before_batch_norm(in_channels, out_channels, 3, stride), gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(out_channels));
  conv2_ = register_module("conv2",
      std::make_shared<Conv2d>(conv_before_batch_norm(out_channels, out_channels, 3, 1), gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (auto shortcut = projection_shortcut(in_channels, out_channels, stride, gen)) {
    downsample_ = register_module("downsample", shortcut);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1_->forward_relu(conv1_->forward(x));
  out = bn2_->forward(conv2_->forward(out));
  const Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  return core::add_relu(out, shortcut);
}

}  // namespace mt::layers
