// The fused SGD step: one thread per element does what one iteration of the CPU loop in
// optim/sgd.cpp (SGD::step_cpu) does, with the same float arithmetic.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/sgd_update.h"

namespace mt::core::cuda {

namespace {
__global__ void sgd_plain(float* p, const float* g, int64_t n, SgdUpdate u) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) {
    const float d = g[k] + u.l2 * p[k];
    p[k] = p[k] * u.shrink - u.lr * d;
  }
}

__global__ void sgd_momentum(float* p, const float* g, float* b, int64_t n, bool first, SgdUpdate u) {
  for (int64_t k = first_index(); k < n; k += grid_stride()) {
    const float d = g[k] + u.l2 * p[k];
    const float buf = first ? d : u.momentum * b[k] + u.keep * d;
    b[k] = buf;
    const float step = u.nesterov ? d + u.momentum * buf : buf;
    p[k] = p[k] * u.shrink - u.lr * step;
  }
}
}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buffer, bool first, const SgdUpdate& u) {
  MT_CHECK(param.is_contiguous() && grad.is_contiguous() && param.numel() == grad.numel(),
           "internal: sgd_update needs contiguous parameter and gradient of one size");
  const int64_t n = param.numel();
  if (n == 0) return;
  if (u.momentum == 0.0f) {
    sgd_plain<<<blocks_for(n), kThreads>>>(param.data<float>(), grad.data<float>(), n, u);
  } else {
    MT_CHECK(buffer.defined() && buffer.numel() == n && buffer.device() == param.device(),
             "internal: sgd_update needs a momentum buffer like the parameter");
    sgd_momentum<<<blocks_for(n), kThreads>>>(param.data<float>(), grad.data<float>(),
                                              buffer.data<float>(), n, first, u);
  }
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace mt::core::cuda
