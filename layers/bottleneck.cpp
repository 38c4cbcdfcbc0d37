#include "layers/bottleneck.h"

#include "core/ops/elementwise.h"
#include "core/ops/nn.h"

namespace mt::layers {

namespace {
Conv2dLayerOptions conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  Conv2dLayerOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = kernel / 2;
  o.bias = false;  // batch norm follows
  return o;
}
}  // namespace

Bottleneck::Bottleneck(int64_t in_channels, int64_t width, int64_t stride, core::Generator& gen) {
  const int64_t out_channels = width * kExpansion;
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(conv(in_channels, width, 1, 1), gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(width));
  conv2_ = register_module("conv2", std::make_shared<Conv2d>(conv(width, width, 3, stride), gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(width));
  conv3_ = register_module("conv3", std::make_shared<Conv2d>(conv(width, out_channels, 1, 1), gen));
  bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    auto ds = std::make_shared<Sequential>();
    ds->push_back(std::make_shared<Conv2d>(conv(in_channels, out_channels, 1, stride), gen));
    ds->push_back(std::make_shared<BatchNorm2d>(out_channels));
    downsample_ = register_module("downsample", ds);
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = core::relu(bn1_->forward(conv1_->forward(x)));
  out = core::relu(bn2_->forward(conv2_->forward(out)));
  out = bn3_->forward(conv3_->forward(out));
  const Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  return core::relu(out + shortcut);
}

}  // namespace mt::layers
