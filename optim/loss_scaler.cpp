#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "optim/clip_grad.h"

namespace mt::optim {

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.init_scale) {
  const auto& o = options_;
  MT_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "loss_scale.init_scale must be a positive number, got ",
           o.init_scale);
  MT_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, "loss_scale.growth_factor must be > 1, got ",
           o.growth_factor);
  MT_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "loss_scale.backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  MT_CHECK(o.growth_interval >= 1, "loss_scale.growth_interval must be >= 1, got ", o.growth_interval);
  MT_CHECK(o.min_scale > 0, "the loss scaler's min_scale must be > 0, got ", o.min_scale);
  // A run asking to start below the floor starts (and stays) at its own scale.
  options_.min_scale = std::min(o.min_scale, o.init_scale);
}

bool DynamicLossScaler::grads_finite(const std::vector<core::Tensor>& params) {
  // The norm is summed in double, so only a NaN or Inf element makes it non-finite.
  return std::isfinite(global_grad_norm(params));
}

void DynamicLossScaler::unscale(const std::vector<core::Tensor>& params, double extra_factor) const {
  const float factor = static_cast<float>(extra_factor / scale_);
  if (factor != 1.0f) scale_grads(params, factor);
}

void DynamicLossScaler::update(bool overflow) {
  if (overflow) {
    ++overflow_steps_;
    good_steps_ = 0;
    if (options_.dynamic) scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    return;
  }
  ++good_steps_;
  if (options_.dynamic && good_steps_ >= options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    // Stay finite in float32: the scale seeds backward as a float tensor.
    if (grown <= 3.0e38) scale_ = grown;
    good_steps_ = 0;
  }
}

void DynamicLossScaler::load_state_dict(const LossScalerState& state) {
  MT_CHECK(std::isfinite(state.scale) && state.scale > 0 && state.good_steps >= 0 && state.overflow_steps >= 0,
           "invalid loss-scaler state (scale ", state.scale, ", good steps ", state.good_steps,
           ", overflow steps ", state.overflow_steps, ")");
  scale_ = options_.dynamic ? state.scale : options_.init_scale;  // static: the config's scale rules
  good_steps_ = state.good_steps;
  overflow_steps_ = state.overflow_steps;
}

}  // namespace mt::optim
