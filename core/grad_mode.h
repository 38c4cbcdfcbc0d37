// Whether operations record the autograd graph. Off inside a NoGradGuard (evaluation,
// optimizer updates, weight initialization). Per thread, like PyTorch.
#pragma once

namespace mt::core {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool on);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mt::core
