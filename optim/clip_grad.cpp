#include "optim/clip_grad.h"

#include <cmath>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"

namespace mt::optim {

namespace {
// Sum of squares in double: float accumulation over millions of elements loses digits.
double squared_norm(const core::Tensor& g) {
  if (g.device().is_cpu() && g.dtype() == core::DType::Float32) {
    const core::Tensor c = g.contiguous();
    const float* p = c.data<float>();
    const int64_t n = c.numel();
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > (1 << 16))
    for (int64_t k = 0; k < n; ++k) acc += double(p[k]) * double(p[k]);
    return acc;
  }
  return core::sum(core::square(g)).item();  // other devices: one small transfer per tensor
}
}  // namespace

double clip_grad_norm(const std::vector<core::Tensor>& params, double max_norm) {
  MT_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  core::NoGradGuard no_grad;
  double total_sq = 0.0;
  for (const auto& p : params)
    if (p.grad().defined()) total_sq += squared_norm(p.grad());
  const double total = std::sqrt(total_sq);
  if (!std::isfinite(total) || total <= max_norm) return total;
  // The small epsilon is PyTorch's: it keeps the clipped norm just below max_norm.
  const float scale = static_cast<float>(max_norm / (total + 1e-6));
  for (const auto& p : params) {
    core::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous();
      core::Tensor(p).set_grad(g);
    }
    g.mul_(scale);
  }
  return total;
}

}  // namespace mt::optim
