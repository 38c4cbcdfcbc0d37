#include "core/kernels/cuda/activation.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/relu_rule.h"

namespace mt::core::cuda {

namespace {
__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = relu_value(x[i]);
}

__global__ void add_relu_forward_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = relu_value(a[i] + b[i]);
}

__global__ void relu_backward_kernel(const float* y, const float* gy, float* gx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = relu_gate(gy[i], y[i]);
}
}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  launch(relu_forward_kernel, blocks_for(n), x.data<float>(), y.data<float>(), n);
}

void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  const int64_t n = y.numel();
  if (n == 0) return;
  launch(relu_backward_kernel, blocks_for(n), y.data<float>(), gy.data<float>(), gx.data<float>(), n);
}

void add_relu_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  launch(add_relu_forward_kernel, blocks_for(n), a.data<float>(), b.data<float>(), y.data<float>(), n);
}

}  // namespace mt::core::cuda
