#include "core/kernels/cuda/activation.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {
__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;  // NaN passes through, as on the CPU
  }
}

__global__ void add_relu_forward_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = a[i] + b[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

__global__ void relu_backward_kernel(const float* y, const float* gy, float* gx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}
}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  relu_forward_kernel<<<blocks_for(n), kThreads>>>(x.data<float>(), y.data<float>(), n);
  MT_CUDA_LAUNCH_CHECK();
}

void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  const int64_t n = y.numel();
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads>>>(y.data<float>(), gy.data<float>(), gx.data<float>(), n);
  MT_CUDA_LAUNCH_CHECK();
}

void add_relu_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  add_relu_forward_kernel<<<blocks_for(n), kThreads>>>(a.data<float>(), b.data<float>(), y.data<float>(), n);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace mt::core::cuda
