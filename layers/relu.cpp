#include "layers/relu.h"

#include "core/ops/nn.h"

namespace mt::layers {

Tensor ReLU::forward(const Tensor& x) { return core::relu(x); }

}  // namespace mt::layers
