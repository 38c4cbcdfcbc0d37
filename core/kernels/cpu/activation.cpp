#include "core/kernels/cpu/activation.h"

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/relu_rule.h"

namespace mt::core::cpu {

// Below this many elements a parallel region costs more than the loop itself.
static constexpr int64_t kParallelElems = 1 << 15;

MT_VECTOR_CLONES void relu_forward(const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) py[i] = relu_value(px[i]);
}

MT_VECTOR_CLONES void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  const float* py = y.data<float>();
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    // Load unconditionally so this is a vector select, not a branch: the sign of y is random,
    // and a mispredicted branch per element costs more than the whole loop otherwise.
    const float g = pg[i];
    po[i] = relu_gate(g, py[i]);
  }
}

MT_VECTOR_CLONES void add_relu_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) py[i] = relu_value(pa[i] + pb[i]);
}

}  // namespace mt::core::cpu
