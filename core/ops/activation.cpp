// Activations (declared in nn.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/activation.h"
#include "core/memory_format.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/activation.h"
#endif

namespace mt::core {

namespace {
// ReLU's gradient from its output y: gy where y > 0, else 0.
Tensor relu_grad(const Tensor& y, const Tensor& g) {
  Tensor gy = in_format_of(g, y);
  Tensor gx = empty_in_format_of(y);
  MT_DISPATCH(y.device(), relu_backward, y, gy, gx);
  return gx;
}
}  // namespace

Tensor relu(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "relu expects a float32 tensor, got ", x.str());
  // Elementwise, so a channels-last input runs the same flat loop and keeps its format.
  Tensor xc = keeps_channels_last(x) ? x : x.contiguous();
  Tensor y = empty_in_format_of(xc);
  MT_DISPATCH(x.device(), relu_forward, xc, y);
  // The output tells where x > 0, so backward keeps y rather than x (y is alive anyway as the
  // next layer's input, so this costs no memory).
  record("ReluBackward", {x}, {y}, [y = y.detach()](const Grads& g, const Needs&) -> Grads {
    return {relu_grad(y, g[0])};
  });
  return y;
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  // One pass needs the two in the same shape and memory order (a residual block's branch and
  // shortcut are); anything else (broadcasting, mixed formats) takes the two ops.
  const bool fusable = a.dtype() == DType::Float32 && b.dtype() == DType::Float32 &&
                       a.device() == b.device() && same_dense_order(a, b);
  if (!fusable) return relu(add(a, b));
  Tensor y = empty_in_format_of(a);
  MT_DISPATCH(a.device(), add_relu_forward, a, b, y);
  // d(a + b)/da = d(a + b)/db = 1: both inputs get ReLU's gradient, one tensor shared.
  record("AddReluBackward", {a, b}, {y}, [y = y.detach()](const Grads& g, const Needs& n) -> Grads {
    Tensor gx = relu_grad(y, g[0]);
    return {n[0] ? gx : Tensor(), n[1] ? gx : Tensor()};
  });
  return y;
}

}  // namespace mt::core
