#include "optim/step_guard.h"

#include <cmath>

#include "core/error.h"
#include "optim/clip_grad.h"

namespace mt::optim {

StepGuard::StepGuard(std::unique_ptr<Optimizer> inner, double max_grad_norm,
                     std::unique_ptr<DynamicLossScaler> loss_scaler)
    : Optimizer(inner->params(), inner->lr()),
      inner_(std::move(inner)),
      max_grad_norm_(max_grad_norm),
      loss_scaler_(std::move(loss_scaler)) {
  MT_CHECK(max_grad_norm_ >= 0, "max_grad_norm must be >= 0 (0 = no clipping), got ", max_grad_norm_);
}

void StepGuard::record_step(bool skipped, double grad_norm) {
  last_overflowed_ = false;
  last_skipped_ = skipped;
  last_norm_ = grad_norm;
  if (skipped) ++skipped_;
}

bool StepGuard::check_and_clip() {
  // clip_grad_norm leaves non-finite gradients unscaled and returns their norm as is.
  last_norm_ = max_grad_norm_ > 0 ? clip_grad_norm(params_, max_grad_norm_) : global_grad_norm(params_);
  last_skipped_ = !std::isfinite(last_norm_);
  if (last_skipped_) ++skipped_;
  return !last_skipped_;
}

void StepGuard::step_with(Optimizer& other) {
  MT_CHECK(!loss_scaler_, "a guarded step with another optimizer does not support loss scaling (the "
           "scaled gradients would be unscaled twice); use precision \"bf16\" or \"fp32\"");
  MT_CHECK(other.params().size() == params_.size(), "a guarded step with another optimizer needs the same "
           "parameters: it has ", other.params().size(), " tensors, the guard ", params_.size());
  last_overflowed_ = false;
  if (check_and_clip()) other.step();
}

void StepGuard::step() {
  last_overflowed_ = false;
  if (!loss_scaler_) {
    if (!check_and_clip()) return;
  } else {
    DynamicLossScaler& scaler = *loss_scaler_;
    const double scale = scaler.scale();
    last_norm_ = global_grad_norm(params_) / scale;
    last_skipped_ = !std::isfinite(last_norm_);
    if (last_skipped_) {
      last_overflowed_ = !scaler.at_minimum();
      if (!last_overflowed_) ++skipped_;
      scaler.update(/*overflow=*/true);
      return;
    }
    // Clipping as clip_grad_norm does it (same epsilon), folded into the unscaling pass.
    const double clip = max_grad_norm_ > 0 && last_norm_ > max_grad_norm_
                            ? static_cast<double>(static_cast<float>(max_grad_norm_ / (last_norm_ + 1e-6)))
                            : 1.0;
    scaler.unscale(params_, clip);
    scaler.update(/*overflow=*/false);
  }
  inner_->set_lr(lr());  // the trainer sets the rate on this wrapper
  inner_->step();
}

}  // namespace mt::optim
