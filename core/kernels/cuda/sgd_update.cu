// The fused SGD step: one thread per element runs sgd_element (sgd_update.h), the same function
// as the CPU loop of optim/sgd.cpp (SGD::step_cpu).
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/sgd_update.h"

namespace mt::core::cuda {

namespace {
__global__ void sgd_kernel(float* p, const float* g, float* b, int64_t n, bool first, SgdUpdate u) {
  float unused = 0.0f;  // no momentum: sgd_element leaves the buffer alone
  for (int64_t k = first_index(); k < n; k += grid_stride()) sgd_element(p[k], g[k], b ? b[k] : unused, first, u);
}
}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buffer, bool first, const SgdUpdate& u) {
  MT_CHECK(param.is_contiguous() && grad.is_contiguous() && param.numel() == grad.numel(),
           "internal: sgd_update needs contiguous parameter and gradient of one size");
  const int64_t n = param.numel();
  if (n == 0) return;
  if (u.momentum != 0.0f) {
    MT_CHECK(buffer.defined() && buffer.numel() == n && buffer.device() == param.device(),
             "internal: sgd_update needs a momentum buffer like the parameter");
  }
  launch(sgd_kernel, blocks_for(n), param.data<float>(), grad.data<float>(),
         u.momentum != 0.0f ? buffer.data<float>() : nullptr, n, first, u);
}

}  // namespace mt::core::cuda
