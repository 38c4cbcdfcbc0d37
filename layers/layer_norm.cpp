#include "layers/layer_norm.h"

#include <cmath>

#include "core/ops/transformer.h"

namespace mt::layers {

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  MT_CHECK(dim > 0, "LayerNorm: dim must be > 0, got ", dim);
  MT_CHECK(eps > 0.0f && std::isfinite(eps), "LayerNorm: eps must be a positive number, got ", eps);
  weight_ = register_parameter("weight", Tensor::ones({dim}));
  bias_ = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  run_forward_pre_hooks();
  MT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == dim_, "LayerNorm(", dim_, "): expected input [..., ", dim_,
           "], got ", x.defined() ? x.str() : std::string("an undefined tensor"));
  return core::layer_norm(x, weight_, bias_, eps_);
}

}  // namespace mt::layers
