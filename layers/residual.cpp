#include "layers/residual.h"

#include "layers/batch_norm2d.h"

namespace mt::layers {

Conv2dLayerOptions conv_before_batch_norm(int64_t in_channels, int64_t out_channels,
                                          int64_t kernel, int64_t stride) {
  Conv2dLayerOptions o;
  o.in_channels = in_channels;
  o.out_channels = out_channels;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = kernel / 2;
  o.bias = false;
  return o;
}

std::shared_ptr<Sequential> projection_shortcut(int64_t in_channels, int64_t out_channels,
                                                int64_t stride, core::Generator& gen) {
  if (stride == 1 && in_channels == out_channels) return nullptr;
  auto ds = std::make_shared<Sequential>();
  ds->push_back(std::make_shared<Conv2d>(conv_before_batch_norm(in_channels, out_channels, 1, stride), gen));
  ds->push_back(std::make_shared<BatchNorm2d>(out_channels));
  return ds;
}

}  // namespace mt::layers
