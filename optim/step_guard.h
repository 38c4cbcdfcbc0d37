// StepGuard: wraps the configured optimizer and guards each step with one look at the global
// gradient norm (the L2 norm over all parameters' gradients together):
//   - a NaN or Inf anywhere in the gradients makes the norm non-finite: the step is skipped
//     (the weights and the optimizer's state stay as they were) and counted, so the trainer can
//     stop or go on as the config says (on_nonfinite);
//   - with max_grad_norm > 0, gradients whose norm exceeds it are scaled down to it first
//     (clipping by global norm, the usual guard against loss spikes in transformer training);
//   - with a loss scaler (float16 training, optim/loss_scaler.h) the gradients arrive
//     multiplied by the scale: the same norm pass finds overflows, and one more pass divides
//     them by the scale and clips (the norm that clipping compares is the unscaled one). An
//     overflow skips the step and lowers the scale; it is not a bad step, and is not counted in
//     skipped_steps(), unless the scale was already at its minimum.
// It sits where the synchronizers call optimizer.step(), i.e. after the gradients were
// averaged, so every rank of an S-SGD job sees the same norm and makes the same decision (and
// keeps the same loss scale).
#pragma once
#include <cstdint>
#include <memory>

#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace mt::optim {

class StepGuard : public Optimizer {
 public:
  // max_grad_norm: 0 = no clipping (the norm is still checked for NaN/Inf). loss_scaler: null =
  // the gradients are not scaled.
  StepGuard(std::unique_ptr<Optimizer> inner, double max_grad_norm,
            std::unique_ptr<DynamicLossScaler> loss_scaler = nullptr);

  void step() override;
  // The same guard (NaN/Inf check, clipping; not loss scaling) before `other`'s step instead of
  // the wrapped optimizer's: `other` updates the same parameters with its own rate and state.
  // CD-SGD's local step uses it (a plain SGD step beside the global one), so a bad local gradient
  // is skipped and counted like any other. last_step_skipped() etc. then describe this step.
  void step_with(Optimizer& other);
  core::StateDict state_dict() const override { return inner_->state_dict(); }
  void load_state_dict(const core::StateDict& state) override { inner_->load_state_dict(state); }

  Optimizer& inner() { return *inner_; }
  DynamicLossScaler* loss_scaler() { return loss_scaler_.get(); }
  const DynamicLossScaler* loss_scaler() const { return loss_scaler_.get(); }
  // The multiplier the loss gets before backward: the scaler's scale, or 1.
  double loss_scale() const { return loss_scaler_ ? loss_scaler_->scale() : 1.0; }

  // For algorithms that apply a step parameter by parameter (step_parameter, no clipping and no
  // loss scaling there): their verdict on the whole step, which they check themselves, so that
  // last_step_skipped(), last_grad_norm() and skipped_steps() speak of it as of step().
  void record_step(bool skipped, double grad_norm);

  bool last_step_skipped() const { return last_skipped_; }  // for any reason
  // Skipped because the scaled gradients overflowed and the scale could still be lowered: a
  // normal event of dynamic loss scaling, not a bad step.
  bool last_step_overflowed() const { return last_overflowed_; }
  double last_grad_norm() const { return last_norm_; }  // unscaled, before clipping
  int64_t skipped_steps() const { return skipped_; }  // bad steps (overflows excluded)

 private:
  // Norm, NaN/Inf check and clipping of the parameters' gradients; false = skip the step.
  bool check_and_clip();

  std::unique_ptr<Optimizer> inner_;
  double max_grad_norm_;
  std::unique_ptr<DynamicLossScaler> loss_scaler_;
  bool last_skipped_ = false;
  bool last_overflowed_ = false;
  double last_norm_ = 0.0;
  int64_t skipped_ = 0;
};

}  // namespace mt::optim
