#include "layers/avg_pool2d.h"

#include "core/ops/nn.h"

namespace mt::layers {

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : kernel_(kernel), stride_(stride < 0 ? kernel : stride), padding_(padding) {
  MT_CHECK(kernel_ > 0 && stride_ > 0, "AvgPool2d: kernel and stride must be > 0, got ", kernel, " and ", stride);
  MT_CHECK(padding_ >= 0 && 2 * padding_ <= kernel_, "AvgPool2d: padding must be in [0, kernel / 2], got ",
           padding, " for kernel ", kernel);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4, "AvgPool2d: expected input [N, C, H, W], got ", x.str());
  MT_CHECK(x.size(2) + 2 * padding_ >= kernel_ && x.size(3) + 2 * padding_ >= kernel_, "AvgPool2d: input ",
           x.str(), " is smaller than the ", kernel_, "x", kernel_, " window");
  return core::avg_pool2d(x, kernel_, stride_, padding_);
}

}  // namespace mt::layers
