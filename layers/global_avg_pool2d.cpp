#include "layers/global_avg_pool2d.h"

#include "core/ops/nn.h"

namespace mt::layers {

Tensor GlobalAvgPool2d::forward(const Tensor& x) { return core::global_avg_pool2d(x); }  // the op checks x

}  // namespace mt::layers
