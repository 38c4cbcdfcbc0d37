// Activations (declared in nn.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/activation.h"
#include "core/memory_format.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/activation.h"
#endif

namespace mt::core {

Tensor relu(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "relu expects a float32 tensor, got ", x.str());
  // Elementwise, so a channels-last input runs the same flat loop and keeps its format.
  Tensor xc = keeps_channels_last(x) ? x : x.contiguous();
  Tensor y = empty_in_format_of(xc);
  MT_DISPATCH(x.device(), relu_forward, xc, y);
  // The output tells where x > 0, so backward keeps y rather than x (y is alive anyway as the
  // next layer's input, so this costs no memory).
  record("ReluBackward", {x}, {y}, [y = y.detach()](const Grads& g, const Needs&) -> Grads {
    Tensor gy = in_format_of(g[0], y);
    Tensor gx = empty_in_format_of(y);
    MT_DISPATCH(y.device(), relu_backward, y, gy, gx);
    return {gx};
  });
  return y;
}

}  // namespace mt::core
