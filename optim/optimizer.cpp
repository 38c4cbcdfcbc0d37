#include "optim/optimizer.h"

#include "core/error.h"

namespace mt::optim {

// Dropping the gradient (rather than filling it with zeros) lets the next backward allocate a
// fresh one and skip a memset; step() treats a parameter without a gradient as "no update".
void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

bool Optimizer::split_state_entry(const std::string& entry, std::string& prefix, size_t& index) {
  const auto dot = entry.rfind('.');
  if (dot == std::string::npos || dot + 1 == entry.size()) return false;
  const std::string num = entry.substr(dot + 1);
  if (num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos) return false;
  prefix = entry.substr(0, dot + 1);
  index = std::stoul(num);
  return true;
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
