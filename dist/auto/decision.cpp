#include "dist/auto/decision.h"

#include "core/error.h"

namespace mt::dist {

std::vector<float> agreed(ProcessGroup& group, std::vector<float> values, ReduceOp op) {
  Tensor t = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}).to(group.device());
  finish(group.allreduce(t, op), group, "auto: agreeing on its measurements");
  if (op != ReduceOp::Max) finish(group.broadcast(t, 0), group, "auto: agreeing on its measurements");
  return t.to(core::Device::cpu()).to_vector();
}

size_t fastest(const std::vector<double>& seconds) {
  size_t best = seconds.size();
  for (size_t i = 0; i < seconds.size(); ++i)
    if (seconds[i] >= 0 && (best == seconds.size() || seconds[i] < seconds[best])) best = i;
  MT_CHECK(best < seconds.size(), "auto: no candidate was measured");
  return best;
}

void DriftWatch::rebase(double seconds) {
  baseline_ = seconds;
  sum_ = 0.0;
  count_ = 0;
}

bool DriftWatch::add(double seconds) {
  if (count_ == window_) rebase(baseline_);
  sum_ += seconds;
  return ++count_ == window_;
}

bool DriftWatch::drifted(double agreed_mean) {
  if (baseline_ <= 0) {
    baseline_ = agreed_mean;  // after a resume: the first window is the reference
    return false;
  }
  if (fires_ >= max_fires_ || agreed_mean <= baseline_ * (1.0 + share_)) return false;
  ++fires_;
  return true;
}

}  // namespace mt::dist
