// Layer normalization (declared in transformer.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/layer_norm.h"
#include "core/ops/transformer.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/layer_norm.h"
#endif

namespace mt::core {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  MT_CHECK(x.dtype() == DType::Float32 && x.dim() >= 1, "layer_norm expects a float32 tensor [..., D], got ",
           x.str());
  const int64_t d = x.shape()[x.dim() - 1];
  for (const Tensor* p : {&weight, &bias}) {
    MT_CHECK(p->defined() && p->dtype() == DType::Float32 && p->dim() == 1 && p->shape()[0] == d,
             "layer_norm: ", p == &weight ? "weight" : "bias", " must be float32 [", d, "] for input ",
             x.str(), ", got ", p->defined() ? p->str() : std::string("an undefined tensor"));
    MT_CHECK(p->device() == x.device(), "layer_norm: ", p == &weight ? "weight " : "bias ", p->str(),
             " is on another device than the input ", x.str());
  }
  MT_CHECK(eps > 0.0f, "layer_norm: eps must be positive (it keeps 1/sqrt(var + eps) finite), got ", eps);
  Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
  const int64_t rows = d > 0 ? x.numel() / d : 0;
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  Tensor mean = Tensor::empty({rows}, DType::Float32, x.device());
  Tensor rstd = Tensor::empty({rows}, DType::Float32, x.device());
  MT_DISPATCH(x.device(), layer_norm_forward, xc, wc, bc, eps, y, mean, rstd);
  // x rather than y is kept: recovering xhat from y would divide by weight, which may be 0.
  record("LayerNormBackward", {x, weight, bias}, {y},
         [x = xc.detach(), w = wc.detach(), mean, rstd](const Grads& g, const Needs& needs) -> Grads {
           Tensor gy = g[0].contiguous();
           Tensor gx = needs[0] ? Tensor::empty(x.shape(), DType::Float32, x.device()) : Tensor();
           Tensor gw = needs[1] ? Tensor::empty(w.shape(), DType::Float32, x.device()) : Tensor();
           Tensor gb = needs[2] ? Tensor::empty(w.shape(), DType::Float32, x.device()) : Tensor();
           MT_DISPATCH(x.device(), layer_norm_backward, x, w, mean, rstd, gy, gx, gw, gb);
           return {gx, gw, gb};
         });
  return y;
}

}  // namespace mt::core
