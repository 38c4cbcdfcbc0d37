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
double checked_fan(const Tensor& w, int64_t fan) {
  MT_CHECK(fan > 0, "cannot initialize ", w.str(), ": its fan is 0");
  return static_cast<double>(fan);
}
}  // namespace

void kaiming_normal_(const Tensor& w, core::Generator& gen) {
  const double stddev = std::sqrt(2.0) / std::sqrt(checked_fan(w, compute_fans(w.shape()).fan_out));
  normal_(w, 0.0, stddev, gen);
}

void default_init_(const Tensor& weight, const Tensor& bias, core::Generator& gen) {
  const double fan_in = checked_fan(weight, compute_fans(weight.shape()).fan_in);
  const double a = std::sqrt(5.0), gain = std::sqrt(2.0 / (1.0 + a * a));  // kaiming_uniform(a)
  const double weight_bound = gain * std::sqrt(3.0 / fan_in);
  uniform_(weight, -weight_bound, weight_bound, gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(fan_in);
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace mt::layers
