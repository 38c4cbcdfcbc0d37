// Optimizer: updates parameters from their .grad, under NoGradGuard. Per-parameter state
// (momentum buffers, Adam moments) is kept by index in parameter order and saved by
// state_dict() so a resumed run continues exactly.
#pragma once
#include <string>
#include <vector>

#include "core/serialize.h"
#include "core/tensor.h"

namespace mt::optim {

using core::Tensor;

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {}
  virtual ~Optimizer() = default;

  virtual void step() = 0;  // parameters without a gradient are left alone
  void zero_grad();         // drops every parameter's gradient
  // Updates parameter i alone from `grad` (its own .grad and the others' are hidden meanwhile and
  // put back): for algorithms that apply each parameter's update when its gradient arrives
  // (ByteScheduler). Goes through step(), so a wrapper (StepGuard) sees it as a step of one.
  void step_parameter(size_t i, const Tensor& grad);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }

  virtual core::StateDict state_dict() const = 0;
  virtual void load_state_dict(const core::StateDict& state) = 0;
  // State entries are named "<prefix><parameter index>": splits "exp_avg.12" into "exp_avg." and
  // 12; false when the name does not end in ".<digits>".
  static bool split_state_entry(const std::string& entry, std::string& prefix, size_t& index);

 protected:
  std::vector<Tensor> params_;
  double lr_;
};

}  // namespace mt::optim
