// The fused Adam/AdamW step: one thread per element runs adam_element (adam_update.h), the
// same function the CPU loop in optim/adam.cpp runs.
#include "core/kernels/cuda/adam_update.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {
__global__ void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamUpdate u) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) {
    float pk = p[k], mk = m[k], vk = v[k];
    adam_element(pk, g[k], mk, vk, u);
    p[k] = pk;
    m[k] = mk;
    v[k] = vk;
  }
}
}  // namespace

void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamUpdate& u) {
  const int64_t n = param.numel();
  MT_CHECK(param.is_contiguous() && grad.is_contiguous() && exp_avg.is_contiguous() &&
               exp_avg_sq.is_contiguous() && grad.numel() == n && exp_avg.numel() == n &&
               exp_avg_sq.numel() == n,
           "internal: adam_update needs contiguous parameter, gradient and moments of one size");
  MT_CHECK(grad.device() == param.device() && exp_avg.device() == param.device() &&
               exp_avg_sq.device() == param.device(),
           "internal: adam_update needs all tensors on the parameter's device");
  if (n == 0) return;
  launch(adam_kernel, blocks_for(n), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
         exp_avg_sq.data<float>(), n, u);
}

}  // namespace mt::core::cuda
