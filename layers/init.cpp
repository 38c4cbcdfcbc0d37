#include "layers/init.h"

#include <cmath>

#include "core/grad_mode.h"

namespace mt::layers {

using core::Tensor;

Fans compute_fans(const core::Shape& s) {
  MT_CHECK(s.size() >= 2, "fan computation needs a weight with at least 2 dims ([out, in, ...]), got ",
           core::shape_str(s));
  const int64_t receptive = core::inner_size(s, 1);  // kh * kw for a convolution
  return {s[1] * receptive, s[0] * receptive};
}

void uniform_(const Tensor& t, double low, double high, core::Generator& gen) {
  core::NoGradGuard no_grad;
  Tensor(t).copy_(core::rand_uniform(t.shape(), static_cast<float>(low), static_cast<float>(high), gen));
}

void normal_(const Tensor& t, double mean, double stddev, core::Generator& gen) {
  core::NoGradGuard no_grad;
  Tensor(t).copy_(core::randn(t.shape(), static_cast<float>(mean), static_cast<float>(stddev), gen));
}

void constant_(const Tensor& t, double value) {
  core::NoGradGuard no_grad;
  Tensor(t).fill_(value);
}

namespace {
int64_t fan_of(const Tensor& w, FanMode mode) {
  const Fans f = compute_fans(w.shape());
  const int64_t fan = mode == FanMode::FanIn ? f.fan_in : f.fan_out;
  MT_CHECK(fan > 0, "cannot initialize ", w.str(), ": its fan is 0");
  return fan;
}
}  // namespace

void kaiming_uniform_(const Tensor& w, double a, FanMode mode, core::Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_of(w, mode)));
  uniform_(w, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& w, FanMode mode, core::Generator& gen) {
  const double stddev = std::sqrt(2.0) / std::sqrt(static_cast<double>(fan_of(w, mode)));
  normal_(w, 0.0, stddev, gen);
}

void default_init_(const Tensor& weight, const Tensor& bias, core::Generator& gen) {
  kaiming_uniform_(weight, std::sqrt(5.0), FanMode::FanIn, gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(compute_fans(weight.shape()).fan_in));
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace mt::layers
