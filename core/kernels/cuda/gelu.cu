// GELU (exact erf form) on the GPU, the CPU kernel's formulas element for element.
#include "core/kernels/cuda/gelu.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v * 0.5f * (1.0f + erff(v * kInvSqrt2));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* gy, float* gx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
    gx[i] = gy[i] * (cdf + v * pdf);
  }
}
}  // namespace

void gelu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  launch(gelu_forward_kernel, blocks_for(n), x.data<float>(), y.data<float>(), n);
}

void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  launch(gelu_backward_kernel, blocks_for(n), x.data<float>(), gy.data<float>(), gx.data<float>(), n);
}

}  // namespace mt::core::cuda
