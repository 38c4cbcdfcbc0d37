#include "layers/linear.h"

#include "core/ops/matmul.h"
#include "layers/init.h"

namespace mt::layers {

Linear::Linear(int64_t in_features, int64_t out_features, core::Generator& gen, bool bias)
    : in_(in_features), out_(out_features) {
  MT_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be > 0, got ",
           in_features, " and ", out_features);
  // Initialize before registering: the tensors do not require grad yet, and the generator is
  // consumed in a fixed order (weight, then bias).
  Tensor w = Tensor::empty({out_features, in_features});
  Tensor b = bias ? Tensor::empty({out_features}) : Tensor();
  default_init_(w, b, gen);
  weight_ = register_parameter("weight", w);
  if (bias) bias_ = register_parameter("bias", b);
}

Tensor Linear::forward(const Tensor& x) {
  run_forward_pre_hooks();
  MT_CHECK(x.dim() == 2 && x.size(1) == in_, "Linear(", in_, " -> ", out_, "): expected input [N, ", in_,
           "], got ", x.str(), (x.dim() > 2 ? "; flatten it first (Flatten layer)" : ""));
  return core::linear(x, weight_, bias_);
}

}  // namespace mt::layers
