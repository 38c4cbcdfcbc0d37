#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/grad_mode.h"
#include "core/random.h"

namespace mt::testing {

using core::DType;

Tensor random_tensor(const core::Shape& shape, uint64_t seed, float low, float high) {
  core::Generator gen(seed);
  return core::rand_uniform(shape, low, high, gen);
}

namespace {
double project(const Tensor& out, const std::vector<float>& r) {
  std::vector<float> v = out.to_vector();
  double acc = 0.0;
  for (size_t i = 0; i < v.size(); ++i) acc += double(v[i]) * r[i];
  return acc;
}
}  // namespace

::testing::AssertionResult gradcheck(const OpFn& f, const std::vector<Tensor>& inputs_in,
                                     const GradcheckOptions& opt) {
  std::vector<Tensor> inputs;
  for (const auto& t : inputs_in) {
    Tensor c = t.defined() ? t.detach().clone() : t;
    if (c.defined() && c.dtype() == DType::Float32) c.set_requires_grad(true);
    inputs.push_back(c);
  }
  Tensor out = f(inputs);
  std::vector<float> r = random_tensor({out.numel()}, opt.seed, -1.0f, 1.0f).to_vector();
  Tensor rt = Tensor::from_vector(r, out.shape());
  out.backward(rt.to(out.device()));

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor x = inputs[k];
    if (!x.defined() || x.dtype() != DType::Float32) continue;
    Tensor analytic = x.grad();
    if (!analytic.defined()) analytic = Tensor::zeros_like(x);
    std::vector<float> ga = analytic.to_vector();
    float* px = x.data<float>();  // inputs are fresh contiguous CPU clones
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float saved = px[i];
      double plus, minus;
      {
        core::NoGradGuard ng;
        px[i] = saved + static_cast<float>(opt.eps);
        plus = project(f(inputs), r);
        px[i] = saved - static_cast<float>(opt.eps);
        minus = project(f(inputs), r);
        px[i] = saved;
      }
      const double numeric = (plus - minus) / (2 * opt.eps);
      const double diff = std::fabs(numeric - ga[i]);
      if (diff > opt.atol + opt.rtol * std::fabs(numeric)) {
        return ::testing::AssertionFailure()
               << "input " << k << " " << x.str() << " element " << i << ": analytic " << ga[i]
               << " vs numeric " << numeric << " (diff " << diff << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol,
                                     double rtol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << actual.str() << " vs " << expected.str();
  std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  double worst = 0;
  size_t worst_i = 0;
  bool ok = true;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - e[i]);
    if (!(d <= atol + rtol * std::fabs(e[i]))) {
      ok = false;
      if (!(d <= worst)) { worst = d; worst_i = i; }
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << worst_i << ": " << a[worst_i] << " vs "
                                       << e[worst_i] << " (|diff| " << worst << ")";
}

}  // namespace mt::testing
