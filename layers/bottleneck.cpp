#include "layers/bottleneck.h"

#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "layers/residual.h"

namespace mt::layers {

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int64_t stride, core::Generator& gen) {
  const int64_t out_channels = width * kExpansion;
  conv1_ = register_module("conv1",
      std::make_shared<Conv2d>(conv_before_batch_norm(in_channels, width, 1, 1), gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(width));
  conv2_ = register_module("conv2",
      std::make_shared<Conv2d>(conv_before_batch_norm(width, width, 3, stride), gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(width));
  conv3_ = register_module("conv3",
      std::make_shared<Conv2d>(conv_before_batch_norm(width, out_channels, 1, 1), gen));
  bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(out_channels));
  if (auto shortcut = projection_shortcut(in_channels, out_channels, stride, gen)) {
    downsample_ = register_module("downsample", shortcut);
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = bn1_->forward_relu(conv1_->forward(x));
  out = bn2_->forward_relu(conv2_->forward(out));
  out = bn3_->forward(conv3_->forward(out));
  const Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  return core::add_relu(out, shortcut);
}

}  // namespace mt::layers
