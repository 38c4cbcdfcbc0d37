// Inverted dropout (declared in nn.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/dropout.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/dropout.h"
#endif

namespace mt::core {

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  MT_CHECK(p >= 0.0f && p <= 1.0f, "dropout: probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;
  MT_CHECK(x.dtype() == DType::Float32, "dropout expects a float32 tensor, got ", x.str());
  // Scaling the kept elements by 1/(1-p) keeps E[y] = x, so evaluation needs no rescaling.
  // p == 1 drops everything; scale 0 avoids 0 * inf = NaN in backward.
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  Tensor mask = Tensor::empty(x.shape(), DType::UInt8, x.device());  // 1 byte per element
  // Reserve one Philox block per 4 elements up front: the kernel draws them by counter, so the
  // mask is a function of (seed, offset) only, whatever the thread count or device.
  const uint64_t counter = gen.reserve(static_cast<uint64_t>((x.numel() + 3) / 4));
  MT_DISPATCH(x.device(), dropout_forward, xc, p, scale, gen.seed(), counter, y, mask);
  record("DropoutBackward", {x}, {y}, [mask, scale](const Grads& g, const Needs&) -> Grads {
    Tensor gy = g[0].contiguous();
    Tensor gx = Tensor::empty(gy.shape(), DType::Float32, gy.device());
    MT_DISPATCH(gy.device(), dropout_backward, gy, mask, scale, gx);
    return {gx};
  });
  return y;
}

}  // namespace mt::core
