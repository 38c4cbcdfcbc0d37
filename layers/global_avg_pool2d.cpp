#include "layers/global_avg_pool2d.h"

#include "core/ops/nn.h"

namespace mt::layers {

Tensor GlobalAvgPool2d::forward(const Tensor& x) {
  MT_CHECK(x.dim() == 4, "GlobalAvgPool2d: expected input [N, C, H, W], got ", x.str());
  return core::global_avg_pool2d(x);
}

}  // namespace mt::layers
