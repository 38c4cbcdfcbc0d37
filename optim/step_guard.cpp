#include "optim/step_guard.h"

#include <cmath>

#include "core/error.h"
#include "optim/clip_grad.h"

namespace mt::optim {

StepGuard::StepGuard(std::unique_ptr<Optimizer> inner, double max_grad_norm)
    : Optimizer(inner->params(), inner->lr()), inner_(std::move(inner)), max_grad_norm_(max_grad_norm) {
  MT_CHECK(max_grad_norm_ >= 0, "max_grad_norm must be >= 0 (0 = no clipping), got ", max_grad_norm_);
}

void StepGuard::step() {
  // clip_grad_norm leaves non-finite gradients unscaled and returns their norm as is.
  last_norm_ = max_grad_norm_ > 0 ? clip_grad_norm(params_, max_grad_norm_) : global_grad_norm(params_);
  last_skipped_ = !std::isfinite(last_norm_);
  if (last_skipped_) {
    ++skipped_;
    return;
  }
  inner_->set_lr(lr());  // the trainer sets the rate on this wrapper
  inner_->step();
}

}  // namespace mt::optim
