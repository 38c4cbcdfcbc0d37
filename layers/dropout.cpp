#include "layers/dropout.h"

#include "core/ops/nn.h"

namespace mt::layers {

Dropout::Dropout(float p, uint64_t seed) : p_(p), gen_(seed) {
  MT_CHECK(p >= 0.0f && p < 1.0f, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return core::dropout(x, p_, is_training(), gen_); }

}  // namespace mt::layers
