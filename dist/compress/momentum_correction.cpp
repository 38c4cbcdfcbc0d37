#include "dist/compress/momentum_correction.h"

#include <cmath>

#include "core/error.h"
#include "core/kernels/cuda/sgd_update.h"

namespace mt::dist {

MomentumCorrection::MomentumCorrection(int64_t numel, MomentumCorrectionOptions options)
    : options_(options), velocity_(Tensor::zeros({numel})) {
  MT_CHECK(options_.momentum > 0 && options_.momentum < 1, "dist.compressor.momentum_correction needs "
           "optimizer.momentum in (0, 1) (it takes the momentum over from the optimizer), got ",
           options_.momentum);
  MT_CHECK(options_.dampening >= 0 && options_.dampening <= 1,
           "optimizer.dampening must be in [0, 1], got ", options_.dampening);
  MT_CHECK(!options_.nesterov || options_.dampening == 0,
           "optimizer.nesterov needs dampening 0, got ", options_.dampening);
  MT_CHECK(std::isfinite(options_.weight_decay) && options_.weight_decay >= 0,
           "optimizer.weight_decay must be >= 0, got ", options_.weight_decay);
}

Tensor MomentumCorrection::direction(const Tensor& grad, const Tensor& weights) {
  const int64_t n = numel();
  MT_CHECK(grad.numel() == n && weights.numel() == n, "momentum correction: gradient of ",
           grad.numel(), " and weights of ", weights.numel(), " values, velocity of ", n);
  const Tensor g = grad.contiguous(), w = weights.contiguous();
  Tensor out = Tensor::empty({n});
  const float* gp = g.data<float>();
  const float* wp = w.data<float>();
  float* u = velocity_.data<float>();
  float* o = out.data<float>();
  // optim::SGD's direction, the same function (sgd_element's first half), without the step.
  core::cuda::SgdUpdate su;
  su.l2 = static_cast<float>(options_.weight_decay);
  su.momentum = static_cast<float>(options_.momentum);
  su.keep = 1.0f - static_cast<float>(options_.dampening);
  su.nesterov = options_.nesterov;
  const bool first = !started_;
  for (int64_t i = 0; i < n; ++i) o[i] = core::cuda::sgd_direction(wp[i], gp[i], u[i], first, su);
  started_ = true;
  return out;
}

void MomentumCorrection::mask_sent(const Tensor& decoded) {
  if (!options_.mask_sent) return;
  MT_CHECK(decoded.numel() == numel(), "momentum correction: decoded payload of ", decoded.numel(),
           " values, velocity of ", numel());
  const Tensor d = decoded.contiguous();
  const float* dp = d.data<float>();
  float* u = velocity_.data<float>();
  for (int64_t i = 0; i < numel(); ++i)
    if (dp[i] != 0.0f) u[i] = 0.0f;
}

void MomentumCorrection::append_state(core::StateDict& state) const {
  state.emplace_back("velocity", velocity_.clone());
  state.emplace_back("velocity_started",
                     Tensor::from_vector(std::vector<int64_t>{started_ ? 1 : 0}, {1}));
}

void MomentumCorrection::load_state(const core::StateDict& state) {
  for (const auto& [name, t] : state) {
    if (name == "velocity") {
      MT_CHECK(t.numel() == numel(), "checkpoint: the momentum-correction velocity holds ",
               t.numel(), " values, the model ", numel());
      velocity_.copy_(t.reshape({numel()}));
    } else if (name == "velocity_started") {
      started_ = t.item_int() != 0;
    }
  }
}

}  // namespace mt::dist
