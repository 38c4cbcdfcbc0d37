// StepGuard: wraps the configured optimizer and guards each step with one look at the global
// gradient norm (the L2 norm over all parameters' gradients together):
//   - a NaN or Inf anywhere in the gradients makes the norm non-finite: the step is skipped
//     (the weights and the optimizer's state stay as they were) and counted, so the trainer can
//     stop or go on as the config says (on_nonfinite);
//   - with max_grad_norm > 0, gradients whose norm exceeds it are scaled down to it first
//     (clipping by global norm, the usual guard against loss spikes in transformer training).
// It sits where the synchronizers call optimizer.step(), i.e. after the gradients were
// averaged, so every rank of an S-SGD job sees the same norm and makes the same decision.
#pragma once
#include <cstdint>
#include <memory>

#include "optim/optimizer.h"

namespace mt::optim {

class StepGuard : public Optimizer {
 public:
  // max_grad_norm: 0 = no clipping (the norm is still checked for NaN/Inf).
  StepGuard(std::unique_ptr<Optimizer> inner, double max_grad_norm);

  void step() override;
  core::StateDict state_dict() const override { return inner_->state_dict(); }
  void load_state_dict(const core::StateDict& state) override { inner_->load_state_dict(state); }

  Optimizer& inner() { return *inner_; }
  bool last_step_skipped() const { return last_skipped_; }
  double last_grad_norm() const { return last_norm_; }  // before clipping
  int64_t skipped_steps() const { return skipped_; }

 private:
  std::unique_ptr<Optimizer> inner_;
  double max_grad_norm_;
  bool last_skipped_ = false;
  double last_norm_ = 0.0;
  int64_t skipped_ = 0;
};

}  // namespace mt::optim
