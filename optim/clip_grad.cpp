#include "optim/clip_grad.h"

#include <cmath>

#include "core/grad_mode.h"
#include "core/kernels/cpu/vector_clones.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"

namespace mt::optim {

namespace {
// Sum of squares of a CPU float tensor in double: float accumulation over millions of elements
// loses digits. `simd` lets each vector lane keep its own partial sum (a reordering the
// compiler may not make on its own), so the loop runs at memory speed.
MT_VECTOR_CLONES double cpu_squared_norm(const core::Tensor& g) {
  const core::Tensor c = g.contiguous();
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  double acc = 0.0;
#pragma omp parallel for simd reduction(+ : acc) schedule(static) if (n > (1 << 16))
  for (int64_t k = 0; k < n; ++k) acc += double(p[k]) * double(p[k]);
  return acc;
}
}  // namespace

double global_grad_norm(const std::vector<core::Tensor>& params) {
  core::NoGradGuard no_grad;
  double total_sq = 0.0;
  // Other devices: the per-tensor sums are added up on the device and read back once, since
  // every read-back waits for the device (one wait per parameter would stall each step).
  core::Tensor device_sq;
  for (const auto& p : params) {
    const core::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.device().is_cpu()) {
      total_sq += g.dtype() == core::DType::Float32 ? cpu_squared_norm(g)
                                                   : core::sum(core::square(g)).item();
    } else {
      const core::Tensor s = core::sum(core::square(g));
      device_sq = device_sq.defined() ? device_sq + s : s;
    }
  }
  if (device_sq.defined()) total_sq += device_sq.item();
  return std::sqrt(total_sq);
}

double clip_grad_norm(const std::vector<core::Tensor>& params, double max_norm) {
  MT_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  core::NoGradGuard no_grad;
  const double total = global_grad_norm(params);
  if (!std::isfinite(total) || total <= max_norm) return total;
  // The small epsilon is PyTorch's: it keeps the clipped norm just below max_norm.
  scale_grads(params, static_cast<float>(max_norm / (total + 1e-6)));
  return total;
}

void scale_grads(const std::vector<core::Tensor>& params, float factor) {
  core::NoGradGuard no_grad;
  for (const auto& p : params) {
    core::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous();
      core::Tensor(p).set_grad(g);
    }
    g.mul_(factor);
  }
}

}  // namespace mt::optim
