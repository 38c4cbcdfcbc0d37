// GELU (declared in transformer.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/gelu.h"
#include "core/ops/transformer.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/gelu.h"
#endif

namespace mt::core {

Tensor gelu(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "gelu expects a float32 tensor, got ", x.str());
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  MT_DISPATCH(x.device(), gelu_forward, xc, y);
  record("GeluBackward", {x}, {y}, [x = xc.detach()](const Grads& g, const Needs&) -> Grads {
    Tensor gy = g[0].contiguous();
    Tensor gx = Tensor::empty(x.shape(), DType::Float32, x.device());
    MT_DISPATCH(x.device(), gelu_backward, x, gy, gx);
    return {gx};
  });
  return y;
}

}  // namespace mt::core
