#include "core/kernels/cpu/gelu.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cpu/vector_math.h"

namespace mt::core::cpu {

namespace {
// erf costs a few dozen flops per element (vectorized: vector_math.h), so parallel regions pay
// off earlier than for relu.
constexpr int64_t kParallelElems = 1 << 13;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
}  // namespace

MT_VECTOR_CLONES void gelu_forward(const Tensor& x, Tensor& y) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (int64_t b = 0; b < vector_blocks(n); ++b) {
    const int64_t end = std::min(n, (b + 1) * kVectorBlock);
    for (int64_t i = b * kVectorBlock; i < end; ++i) {
      const float v = px[i];
      py[i] = v * 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    }
  }
}

MT_VECTOR_CLONES void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) {
  const float* px = x.data<float>();
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (int64_t b = 0; b < vector_blocks(n); ++b) {
    const int64_t end = std::min(n, (b + 1) * kVectorBlock);
    for (int64_t i = b * kVectorBlock; i < end; ++i) {
      const float v = px[i];
      const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
      po[i] = pg[i] * (cdf + v * pdf);
    }
  }
}

}  // namespace mt::core::cpu
