#include "layers/max_pool2d.h"

#include "core/ops/nn.h"

namespace mt::layers {

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : kernel_(kernel), stride_(stride < 0 ? kernel : stride), padding_(padding) {
  MT_CHECK(kernel_ > 0 && stride_ > 0, "MaxPool2d: kernel and stride must be > 0, got ", kernel, " and ", stride);
  MT_CHECK(padding_ >= 0 && 2 * padding_ <= kernel_, "MaxPool2d: padding must be in [0, kernel / 2], got ",
           padding, " for kernel ", kernel);
}

// The op checks the input's shape against the window.
Tensor MaxPool2d::forward(const Tensor& x) { return core::max_pool2d(x, kernel_, stride_, padding_); }

}  // namespace mt::layers
