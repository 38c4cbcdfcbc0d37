#include "optim/optimizer.h"

#include "core/error.h"

namespace mt::optim {

// Dropping the gradient (rather than filling it with zeros) lets the next backward allocate a
// fresh one and skip a memset; step() treats a parameter without a gradient as "no update".
void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

void Optimizer::step_parameter(size_t i, const Tensor& grad) {
  MT_CHECK(i < params_.size(), "step_parameter: parameter ", i, " of ", params_.size());
  // Every optimizer leaves a parameter without a gradient alone, so hiding the others' makes
  // step() a step of parameter i with its own per-parameter state (momentum, Adam's count).
  std::vector<Tensor> kept(params_.size());
  for (size_t j = 0; j < params_.size(); ++j) {
    kept[j] = params_[j].grad();
    params_[j].zero_grad();
  }
  params_[i].set_grad(grad);
  try {
    step();
  } catch (...) {
    for (size_t j = 0; j < params_.size(); ++j) params_[j].set_grad(kept[j]);
    throw;
  }
  for (size_t j = 0; j < params_.size(); ++j) params_[j].set_grad(kept[j]);
}

}  // namespace mt::optim
