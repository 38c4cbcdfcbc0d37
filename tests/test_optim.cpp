// Optimizers, learning-rate schedules and gradient clipping: SGD's variants and Adam/AdamW
// against closed forms and a double-precision reference, convergence on least squares, resuming
// from a state dict, weight-decay groups, option validation, and the fused CUDA updates against
// the CPU ones (skipped visibly without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numbers>
#include <unistd.h>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/serialize.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_schedule.h"
#include "optim/registry.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"

using namespace mt::core;
using namespace mt::optim;
using mt::testing::all_close;

namespace {

Tensor param(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, {n}).set_requires_grad(true);
}

// Runs `steps` SGD steps on one parameter with the gradient given by grad_of(p).
std::vector<float> run_sgd(SgdOptions opt, std::vector<float> p0, int steps,
                           const std::function<std::vector<float>(const std::vector<float>&)>& grad_of) {
  Tensor p = param(p0);
  SGD sgd({p}, opt);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> g = grad_of(p.to_vector());
    p.set_grad(Tensor::from_vector(g, p.shape()));
    sgd.step();
  }
  return p.to_vector();
}

void expect_near_vec(const std::vector<float>& a, const std::vector<double>& b, double tol = 1e-6) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}

const std::vector<float> kP0 = {1.0f, -2.0f};
const std::vector<float> kG = {0.5f, -1.0f};
auto constant_grad = [](const std::vector<float>&) { return kG; };
auto zero_grad_fn = [](const std::vector<float>& p) { return std::vector<float>(p.size(), 0.0f); };

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SGD, PlainIsGradientDescent) {
  SgdOptions o;
  o.lr = 0.1;
  auto p = run_sgd(o, kP0, 3, constant_grad);
  // p3 = p0 - 3 * lr * g
  expect_near_vec(p, {1.0 - 0.3 * 0.5, -2.0 + 0.3 * 1.0});
}

TEST(SGD, MomentumMatchesClosedForm) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  auto p = run_sgd(o, kP0, 3, constant_grad);
  // buf1 = g, buf2 = (1 + mu) g, buf3 = (1 + mu + mu^2) g; p3 = p0 - lr g (3 + 2 mu + mu^2).
  const double f = 0.1 * (3 + 2 * 0.9 + 0.81);
  expect_near_vec(p, {1.0 - f * 0.5, -2.0 + f * 1.0});
}

TEST(SGD, DampeningSkipsTheFirstStep) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.dampening = 0.5;
  auto p = run_sgd(o, kP0, 3, constant_grad);
  // buf1 = g (no dampening on the first step, as PyTorch), buf2 = (mu + 0.5) g,
  // buf3 = (mu (mu + 0.5) + 0.5) g.
  const double b1 = 1, b2 = 0.9 + 0.5, b3 = 0.9 * b2 + 0.5;
  const double f = 0.1 * (b1 + b2 + b3);
  expect_near_vec(p, {1.0 - f * 0.5, -2.0 + f * 1.0});
}

TEST(SGD, NesterovMatchesClosedForm) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  auto p = run_sgd(o, kP0, 3, constant_grad);
  // step_t = g + mu buf_t with buf_t = (1 + ... + mu^(t-1)) g.
  const double mu = 0.9;
  const double b1 = 1, b2 = 1 + mu, b3 = 1 + mu + mu * mu;
  const double f = 0.1 * ((1 + mu * b1) + (1 + mu * b2) + (1 + mu * b3));
  expect_near_vec(p, {1.0 - f * 0.5, -2.0 + f * 1.0});
}

TEST(SGD, L2WeightDecayAddsToTheGradient) {
  SgdOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  // Zero loss gradient: only the decay acts, p_t = p0 (1 - lr wd)^t.
  auto p = run_sgd(o, kP0, 3, zero_grad_fn);
  const double f = std::pow(1 - 0.1 * 0.01, 3);
  expect_near_vec(p, {1.0 * f, -2.0 * f});
  // With a gradient: p1 = p0 - lr (g + wd p0).
  auto q = run_sgd(o, kP0, 1, constant_grad);
  expect_near_vec(q, {1.0 - 0.1 * (0.5 + 0.01 * 1.0), -2.0 - 0.1 * (-1.0 + 0.01 * -2.0)});
}

TEST(SGD, L2DecayGoesThroughMomentumDecoupledDoesNot) {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  const double lr = 0.1, mu = 0.9, wd = 0.1;
  // Coupled: the decay term enters the momentum buffer.
  auto p = run_sgd(o, {2.0f}, 2, zero_grad_fn);
  const double p1 = 2.0 * (1 - lr * wd);
  const double buf2 = mu * (wd * 2.0) + wd * p1;
  expect_near_vec(p, {p1 - lr * buf2});
  // Decoupled: p shrinks by (1 - lr wd) per step and the buffer sees only the loss gradient.
  o.decoupled_weight_decay = true;
  auto q = run_sgd(o, {2.0f}, 2, zero_grad_fn);
  expect_near_vec(q, {2.0 * (1 - lr * wd) * (1 - lr * wd)});
  auto r = run_sgd(o, {2.0f}, 2, [](const std::vector<float>&) { return std::vector<float>{1.0f}; });
  // p1 = 2 (1 - lr wd) - lr; p2 = p1 (1 - lr wd) - lr (1 + mu).
  const double r1 = 2.0 * (1 - lr * wd) - lr;
  expect_near_vec(r, {r1 * (1 - lr * wd) - lr * (1 + mu)});
}

TEST(SGD, ParametersWithoutGradientAreLeftAlone) {
  Tensor a = param({1, 2}), b = param({3, 4});
  SgdOptions o;
  o.momentum = 0.9;
  SGD sgd({a, b}, o);
  a.set_grad(Tensor::from_vector(std::vector<float>{1, 1}, {2}));
  sgd.step();
  EXPECT_EQ(b.to_vector(), (std::vector<float>{3, 4}));
  auto state = sgd.state_dict();
  ASSERT_EQ(state.size(), 1u);  // b never got a momentum buffer
  EXPECT_EQ(state[0].first, "momentum.0");
  sgd.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(SGD, NoStateWithoutMomentum) {
  Tensor a = param({1, 2});
  SGD sgd({a}, SgdOptions{});
  EXPECT_TRUE(sgd.state_dict().empty());
  a.set_grad(Tensor::ones({2}));
  sgd.step();
  EXPECT_TRUE(sgd.state_dict().empty());
}

TEST(SGD, LeastSquaresConverges) {
  Generator gen(7);
  Tensor X = rand_uniform({64, 3}, -1, 1, gen);
  Tensor w_true = Tensor::from_vector(std::vector<float>{2.0f, -1.0f, 0.5f}, {3, 1});
  Tensor y = matmul(X, w_true);
  Tensor w = Tensor::zeros({3, 1}).set_requires_grad(true);
  Tensor b = Tensor::zeros({1}).set_requires_grad(true);
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  SGD sgd({w, b}, o);
  double loss_value = 0;
  for (int it = 0; it < 300; ++it) {
    sgd.zero_grad();
    Tensor loss = mean(square(matmul(X, w) + b - y));
    loss.backward();
    sgd.step();
    loss_value = loss.item();
  }
  EXPECT_LT(loss_value, 1e-8);
  EXPECT_TRUE(all_close(w, w_true, 1e-3, 0));
  EXPECT_NEAR(b.item(), 0.0, 1e-3);
}

TEST(SGD, StateDictResumesIdentically) {
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 1e-2;
  // The gradient depends on the weights, so any difference in state shows up in the result.
  auto step_with = [](SGD& sgd, std::vector<Tensor>& ps) {
    for (auto& p : ps) {
      std::vector<float> v = p.to_vector(), g(v.size());
      for (size_t i = 0; i < v.size(); ++i) g[i] = 0.3f * v[i] + 0.1f * float(i) - 0.2f;
      p.set_grad(Tensor::from_vector(g, p.shape()));
    }
    sgd.step();
  };
  std::vector<Tensor> ps = {param({1, 2, 3}), param({-1, 0.5})};
  SGD a(ps, o);
  for (int s = 0; s < 3; ++s) step_with(a, ps);
  // Snapshot (state_dict returns live tensors: copy them, as saving to disk would).
  StateDict saved;
  for (auto& [n, t] : a.state_dict()) saved.emplace_back(n, t.clone());
  std::vector<Tensor> ps2;
  for (auto& p : ps) ps2.push_back(p.detach().clone().set_requires_grad(true));
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].first, "momentum.0");
  EXPECT_EQ(saved[1].first, "momentum.1");

  for (int s = 0; s < 3; ++s) step_with(a, ps);
  SGD b(ps2, o);
  b.load_state_dict(saved);
  for (int s = 0; s < 3; ++s) step_with(b, ps2);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].to_vector(), ps2[i].to_vector()) << "param " << i;
}

TEST(SGD, BadStateIsRejected) {
  Tensor a = param({1, 2});
  SgdOptions o;
  o.momentum = 0.9;
  SGD sgd({a}, o);
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"momentum.3", Tensor::zeros({2})}}); }).find("only 1 parameters"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"momentum.0", Tensor::zeros({3})}}); }).find("shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sgd.load_state_dict({{"velocity.0", Tensor::zeros({2})}}); }).find("velocity.0"),
            std::string::npos);
}

TEST(SGD, BadOptionsAreErrors) {
  auto make = [](SgdOptions o) { return error_of([&] { SGD s({param({1})}, o); }); };
  SgdOptions o;
  o.nesterov = true;
  EXPECT_NE(make(o).find("nesterov"), std::string::npos);
  o.momentum = 0.9;
  o.dampening = 0.1;
  EXPECT_NE(make(o).find("dampening"), std::string::npos);
  SgdOptions neg;
  neg.lr = -1;
  EXPECT_NE(make(neg).find("lr"), std::string::npos);
  SgdOptions wd;
  wd.weight_decay = -1;
  EXPECT_NE(make(wd).find("weight_decay"), std::string::npos);
  EXPECT_NE(error_of([] { SGD s({}, SgdOptions{}); }).find("empty"), std::string::npos);
}

TEST(OptimizerRegistry, BuildsSgdAndListsNames) {
  Tensor a = param({1, 2});
  OptimizerOptions o;
  o.lr = 0.5;
  o.momentum = 0.9;
  auto opt = build_optimizer("sgd", {a}, o);
  ASSERT_NE(dynamic_cast<SGD*>(opt.get()), nullptr);
  EXPECT_DOUBLE_EQ(opt->lr(), 0.5);
  EXPECT_DOUBLE_EQ(dynamic_cast<SGD*>(opt.get())->options().momentum, 0.9);
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"sgd", "adam", "adamw"}));
  std::string msg = error_of([&] { build_optimizer("adagrad", {a}, o); });
  EXPECT_NE(msg.find("adagrad"), std::string::npos);
  EXPECT_NE(msg.find("sgd, adam, adamw"), std::string::npos);
}

TEST(LrSchedule, Constant) {
  LrSchedule s(LrScheduleOptions{});
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(57.3), 0.1);
}

TEST(LrSchedule, Step) {
  LrScheduleOptions o;
  o.type = "step";
  o.base_lr = 1.0;
  o.gamma = 0.5;
  o.step_epochs = 10;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(9.99), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(25), 0.25);
}

TEST(LrSchedule, MultiStep) {
  LrScheduleOptions o;
  o.type = "multistep";
  o.base_lr = 0.1;
  o.milestones = {100, 150};
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(99.9), 0.1);
  EXPECT_NEAR(s.lr_at(100), 0.01, 1e-15);
  EXPECT_NEAR(s.lr_at(149), 0.01, 1e-15);
  EXPECT_NEAR(s.lr_at(150), 0.001, 1e-15);
  EXPECT_NEAR(s.lr_at(500), 0.001, 1e-15);
}

TEST(LrSchedule, CosineEndpointsAndMiddle) {
  LrScheduleOptions o;
  o.type = "cosine";
  o.base_lr = 0.2;
  o.min_lr = 0.02;
  o.total_epochs = 90;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.2);
  EXPECT_NEAR(s.lr_at(45), 0.11, 1e-12);
  EXPECT_NEAR(s.lr_at(90), 0.02, 1e-15);
  EXPECT_NEAR(s.lr_at(120), 0.02, 1e-15);  // stays at min_lr after the end
  EXPECT_NEAR(s.lr_at(30), 0.02 + 0.18 * 0.5 * (1 + std::cos(std::numbers::pi / 3)), 1e-12);
}

TEST(LrSchedule, WarmupRampsLinearly) {
  LrScheduleOptions o;
  o.type = "multistep";
  o.base_lr = 0.4;
  o.milestones = {30};
  o.warmup_epochs = 5;
  o.warmup_start_factor = 0.25;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);                      // 0.25 * 0.4
  EXPECT_NEAR(s.lr_at(2.5), 0.4 * (0.25 + 0.75 * 0.5), 1e-15);  // halfway
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.4);
  EXPECT_NEAR(s.lr_at(30), 0.04, 1e-15);
  // Warm-up multiplies the scheduled value: on a cosine it ramps towards the cosine curve.
  LrScheduleOptions c;
  c.type = "cosine";
  c.base_lr = 1.0;
  c.total_epochs = 10;
  c.warmup_epochs = 2;
  c.warmup_start_factor = 0.0;
  LrSchedule cs(c);
  EXPECT_DOUBLE_EQ(cs.lr_at(0), 0.0);
  EXPECT_NEAR(cs.lr_at(1), 0.5 * 0.5 * (1 + std::cos(std::numbers::pi * 0.1)), 1e-12);
}

TEST(LrSchedule, BadOptionsNameTheField) {
  auto err = [](LrScheduleOptions o) { return error_of([&] { LrSchedule s(o); }); };
  LrScheduleOptions o;
  o.type = "exponential";
  std::string m = err(o);
  EXPECT_NE(m.find("exponential"), std::string::npos);
  EXPECT_NE(m.find("cosine"), std::string::npos);
  o = {};
  o.type = "multistep";
  o.milestones = {50, 30};
  EXPECT_NE(err(o).find("milestones"), std::string::npos);
  o = {};
  o.base_lr = -0.1;
  EXPECT_NE(err(o).find("base_lr"), std::string::npos);
  o = {};
  o.warmup_epochs = -1;
  EXPECT_NE(err(o).find("warmup_epochs"), std::string::npos);
  o = {};
  o.type = "step";
  o.step_epochs = 0;
  EXPECT_NE(err(o).find("step_epochs"), std::string::npos);
  o = {};
  o.type = "cosine";
  o.total_epochs = 0;
  EXPECT_NE(err(o).find("total_epochs"), std::string::npos);
  o = {};
  o.gamma = -0.5;
  EXPECT_NE(err(o).find("gamma"), std::string::npos);
  o = {};
  o.warmup_start_factor = 2;
  EXPECT_NE(err(o).find("warmup_start_factor"), std::string::npos);
  EXPECT_EQ(lr_schedule_types(),
            (std::vector<std::string>{"constant", "step", "multistep", "cosine", "linear"}));
  EXPECT_THROW(LrSchedule(LrScheduleOptions{}).lr_at(-1), Error);
}

TEST(ClipGradNorm, ScalesToMaxNormAndReturnsTotal) {
  Tensor a = param({0, 0}), b = param({0}), c = param({5});
  a.set_grad(Tensor::from_vector(std::vector<float>{3, 4}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<float>{12}, {1}));
  // c has no gradient: skipped.
  double norm = clip_grad_norm({a, b, c}, 100.0);
  EXPECT_NEAR(norm, 13.0, 1e-9);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3, 4}));  // under the limit: untouched
  norm = clip_grad_norm({a, b, c}, 6.5);
  EXPECT_NEAR(norm, 13.0, 1e-9);
  expect_near_vec(a.grad().to_vector(), {1.5, 2.0}, 1e-5);
  expect_near_vec(b.grad().to_vector(), {6.0}, 1e-5);
  EXPECT_FALSE(c.grad().defined());
  EXPECT_THROW(clip_grad_norm({a}, 0.0), Error);
}

// ---------------------------------------------------------------------------------------------
// Adam and AdamW

namespace {

// Adam as the paper writes it, in double: bias-corrected moments m_hat, v_hat and the step
// lr * m_hat / (sqrt(v_hat) + eps). The implementation folds the corrections differently (as
// PyTorch does); the two agree up to float rounding.
struct ReferenceAdam {
  double lr, beta1, beta2, eps, wd;
  bool decoupled;
  std::vector<double> p, m, v;
  int t = 0;

  void step(const std::vector<float>& grad) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) p[i] -= lr * wd * p[i];
      else g += wd * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(beta1, t));
      const double v_hat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// A gradient that depends on the weights, so that weight decay and the update interact.
std::vector<float> coupled_grad(const std::vector<float>& p) {
  std::vector<float> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i] = 0.3f * p[i] + 0.1f * float(i) - 0.2f;
  return g;
}

void expect_rel_near(const std::vector<float>& a, const std::vector<double>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], rel * std::abs(b[i])) << "element " << i;
}

// Three steps of Adam/AdamW against ReferenceAdam, weights and moments.
void check_against_reference(bool decoupled) {
  AdamOptions o;
  o.lr = 0.1;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.weight_decay = 0.2;
  o.decoupled_weight_decay = decoupled;
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f};
  Tensor p = param(p0);
  Adam adam({p}, o);
  ReferenceAdam ref{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled,
                    std::vector<double>(p0.begin(), p0.end()), std::vector<double>(p0.size(), 0.0),
                    std::vector<double>(p0.size(), 0.0)};
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> g = coupled_grad(p.to_vector());
    p.set_grad(Tensor::from_vector(g, p.shape()));
    adam.step();
    ref.step(g);
    expect_rel_near(p.to_vector(), ref.p, 1e-6);
  }
  EXPECT_EQ(adam.steps_taken(0), 3);
  const StateDict st = adam.state_dict();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].first, "exp_avg.0");
  EXPECT_EQ(st[1].first, "exp_avg_sq.0");
  EXPECT_EQ(st[2].first, "step.0");
  expect_rel_near(st[0].second.to_vector(), ref.m, 1e-6);
  expect_rel_near(st[1].second.to_vector(), ref.v, 1e-6);
  EXPECT_EQ(st[2].second.item_int(), 3);
}

AdamOptions adam_options(double lr, double wd, bool decoupled) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = wd;
  o.decoupled_weight_decay = decoupled;
  return o;
}

}  // namespace

TEST(Adam, MatchesReferenceWithL2WeightDecay) { check_against_reference(false); }

TEST(AdamW, MatchesReferenceWithDecoupledWeightDecay) { check_against_reference(true); }

TEST(Adam, BiasCorrectionMakesEveryStepLrWithAConstantGradient) {
  // With a constant gradient g the corrected moments are exactly g and g^2 at every step, so each
  // step is lr * g / (|g| + eps) whatever the betas: p3 = p0 - 3 lr g / (|g| + eps). Without the
  // correction the first step alone would be sqrt(1 - beta2) / (1 - beta1) times off.
  const std::vector<float> g = {0.5f, -3.0f, 1e-3f};
  for (auto [b1, b2] : {std::pair{0.9, 0.999}, std::pair{0.5, 0.9}, std::pair{0.0, 0.99}}) {
    AdamOptions o;
    o.lr = 0.01;
    o.beta1 = b1;
    o.beta2 = b2;
    o.eps = 1e-4;
    Tensor p = param({1.0f, 2.0f, -1.0f});
    Adam adam({p}, o);
    for (int s = 0; s < 3; ++s) {
      p.set_grad(Tensor::from_vector(g, {3}));
      adam.step();
    }
    std::vector<double> expected;
    for (size_t i = 0; i < g.size(); ++i)
      expected.push_back(std::vector<double>{1, 2, -1}[i] - 3 * 0.01 * g[i] / (std::abs(g[i]) + 1e-4));
    expect_near_vec(p.to_vector(), expected, 1e-6);  // float resolution near 2 is 2.4e-7
  }
}

TEST(AdamW, DecayShrinksTheWeightsWithoutTouchingTheMoments) {
  // Zero loss gradient: AdamW's moments stay zero (the update is 0 / eps = 0) and only the
  // decoupled decay acts, p_t = p0 (1 - lr wd)^t. Adam's L2 decay instead becomes the gradient
  // wd * p, normalized like any gradient: the first step is exactly lr towards zero, the next
  // ones about lr (the gradient shrinks a little with p).
  auto p = param({2.0f, -4.0f});
  Adam adamw({p}, adam_options(0.1, 0.5, true));
  auto q = param({2.0f, -4.0f});
  Adam adam({q}, adam_options(0.1, 0.5, false));
  for (int s = 0; s < 3; ++s) {
    p.set_grad(Tensor::zeros({2}));
    q.set_grad(Tensor::zeros({2}));
    adamw.step();
    adam.step();
    if (s == 0) expect_near_vec(q.to_vector(), {2.0 - 0.1, -4.0 + 0.1}, 1e-6);
  }
  const double f = std::pow(1 - 0.1 * 0.5, 3);
  expect_near_vec(p.to_vector(), {2.0 * f, -4.0 * f});
  EXPECT_EQ(adamw.state_dict()[0].second.to_vector(), (std::vector<float>{0, 0}));
  expect_near_vec(q.to_vector(), {2.0 - 0.3, -4.0 + 0.3}, 1e-3);
}

TEST(Adam, FrozenParametersKeepTheirStepCount) {
  Tensor a = param({1, 2}), b = param({3});
  Adam adam({a, b}, AdamOptions{});
  a.set_grad(Tensor::ones({2}));
  b.set_grad(Tensor::ones({1}));
  adam.step();
  b.zero_grad();
  adam.step();
  EXPECT_EQ(adam.steps_taken(0), 2);
  EXPECT_EQ(adam.steps_taken(1), 1);
  EXPECT_NEAR(b.item(), 3.0 - 1e-3, 1e-6);  // one step of lr
}

TEST(Adam, StateDictRoundTripThroughAFileContinuesIdentically) {
  AdamOptions o = adam_options(0.05, 1e-2, true);
  // Parameter 1 sits out some steps, so the step counts differ between parameters.
  auto step_with = [](Adam& adam, std::vector<Tensor>& ps, int s) {
    for (size_t k = 0; k < ps.size(); ++k) {
      if (k == 1 && s % 2 == 1) {
        ps[k].zero_grad();
        continue;
      }
      ps[k].set_grad(Tensor::from_vector(coupled_grad(ps[k].to_vector()), ps[k].shape()));
    }
    adam.step();
  };
  std::vector<Tensor> ps = {param({1, 2, 3}), param({-1, 0.5}), param({4})};
  Adam a(ps, o);
  for (int s = 0; s < 3; ++s) step_with(a, ps, s);
  ASSERT_EQ(a.steps_taken(1), 2);

  Archive saved;
  saved.add("optimizer.", a.state_dict());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mt_test_adam_" + std::to_string(getpid()) + ".ckpt")).string();
  save_archive(path, saved);
  const StateDict loaded_state = load_archive(path).with_prefix("optimizer.");
  std::filesystem::remove(path);
  ASSERT_EQ(loaded_state.size(), 9u);
  std::vector<Tensor> ps2;
  for (auto& p : ps) ps2.push_back(p.detach().clone().set_requires_grad(true));

  for (int s = 3; s < 7; ++s) step_with(a, ps, s);
  Adam b(ps2, o);
  b.load_state_dict(loaded_state);
  EXPECT_EQ(b.steps_taken(0), 3);
  EXPECT_EQ(b.steps_taken(1), 2);
  for (int s = 3; s < 7; ++s) step_with(b, ps2, s);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].to_vector(), ps2[i].to_vector()) << "param " << i;

  // Without the state the continuation differs (the test would notice a load that did nothing).
  std::vector<Tensor> ps3;
  for (auto& p : ps2) ps3.push_back(param(p.to_vector()));
  Adam c(ps3, o);
  step_with(c, ps3, 7);
  step_with(b, ps2, 7);
  EXPECT_NE(ps3[0].to_vector(), ps2[0].to_vector());
}

TEST(Adam, BadStateIsRejected) {
  Tensor a = param({1, 2});
  Adam adam({a}, AdamOptions{});
  const Tensor step1 = Tensor::from_vector(std::vector<int64_t>{1}, {1});
  auto load_err = [&](StateDict st) { return error_of([&] { adam.load_state_dict(st); }); };
  std::string m = load_err({{"momentum.0", Tensor::zeros({2})}});
  EXPECT_NE(m.find("momentum.0"), std::string::npos) << m;
  EXPECT_NE(m.find("exp_avg"), std::string::npos) << m;
  m = load_err({{"exp_avg.1", Tensor::zeros({2})}});
  EXPECT_NE(m.find("only 1 parameters"), std::string::npos) << m;
  m = load_err({{"exp_avg.0", Tensor::zeros({3})}, {"exp_avg_sq.0", Tensor::zeros({2})}, {"step.0", step1}});
  EXPECT_NE(m.find("shape"), std::string::npos) << m;
  m = load_err({{"exp_avg.0", Tensor::zeros({2})}, {"step.0", step1}});
  EXPECT_NE(m.find("incomplete"), std::string::npos) << m;
  EXPECT_NE(m.find("exp_avg_sq.0"), std::string::npos) << m;
  m = load_err({{"exp_avg.0", Tensor::zeros({2})}, {"exp_avg_sq.0", Tensor::zeros({2})},
                {"step.0", Tensor::ones({1})}});
  EXPECT_NE(m.find("int64"), std::string::npos) << m;
  // A failed load leaves the state as it was.
  EXPECT_TRUE(adam.state_dict().empty());
}

TEST(Adam, BadOptionsAreErrors) {
  auto make = [](AdamOptions o) { return error_of([&] { Adam a({param({1})}, o); }); };
  auto with = [](auto set) {
    AdamOptions o;
    set(o);
    return o;
  };
  EXPECT_NE(make(with([](AdamOptions& o) { o.beta1 = 1.0; })).find("beta1"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) { o.beta1 = -0.1; })).find("beta1"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) { o.beta2 = 1.5; })).find("beta2"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) { o.eps = -1e-8; })).find("eps"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) { o.lr = -1e-3; })).find("lr"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) { o.weight_decay = -1; })).find("weight_decay"), std::string::npos);
  EXPECT_NE(make(with([](AdamOptions& o) {
              o.decoupled_weight_decay = true;
              o.lr = -1;
            })).find("AdamW"),
            std::string::npos);
  EXPECT_NE(error_of([] { Adam a({}, AdamOptions{}); }).find("empty"), std::string::npos);
  EXPECT_EQ(make(AdamOptions{}), "(no error)");
}

TEST(Adam, LeastSquaresConverges) {
  Generator gen(7);
  Tensor X = rand_uniform({64, 3}, -1, 1, gen);
  Tensor w_true = Tensor::from_vector(std::vector<float>{2.0f, -1.0f, 0.5f}, {3, 1});
  Tensor y = matmul(X, w_true);
  Tensor w = Tensor::zeros({3, 1}).set_requires_grad(true);
  Tensor b = Tensor::zeros({1}).set_requires_grad(true);
  Adam adam({w, b}, adam_options(0.1, 0.0, false));
  // The linear schedule takes the rate down to 0, which lets Adam settle instead of hovering at
  // a distance of about lr around the minimum.
  LrScheduleOptions so;
  so.type = "linear";
  so.base_lr = 0.1;
  so.total_epochs = 1;
  LrSchedule schedule(so);
  const int iters = 600;
  double loss_value = 0;
  for (int it = 0; it < iters; ++it) {
    adam.set_lr(schedule.lr_at(double(it) / iters));
    adam.zero_grad();
    Tensor loss = mean(square(matmul(X, w) + b - y));
    loss.backward();
    adam.step();
    loss_value = loss.item();
  }
  EXPECT_LT(loss_value, 1e-7);
  EXPECT_TRUE(all_close(w, w_true, 1e-3, 0));
  EXPECT_NEAR(b.item(), 0.0, 1e-3);
}

// ---------------------------------------------------------------------------------------------
// The registry: Adam by name, and weight-decay groups

TEST(OptimizerRegistry, BuildsAdamAndAdamW) {
  OptimizerOptions o;
  o.lr = 0.002;
  o.beta1 = 0.85;
  o.beta2 = 0.98;
  o.eps = 1e-7;
  o.weight_decay = 0.01;
  auto adam = build_optimizer("adam", {param({1, 2})}, o);
  auto* a = dynamic_cast<Adam*>(adam.get());
  ASSERT_NE(a, nullptr);
  EXPECT_DOUBLE_EQ(a->lr(), 0.002);
  EXPECT_DOUBLE_EQ(a->options().beta1, 0.85);
  EXPECT_DOUBLE_EQ(a->options().beta2, 0.98);
  EXPECT_DOUBLE_EQ(a->options().eps, 1e-7);
  EXPECT_DOUBLE_EQ(a->options().weight_decay, 0.01);
  EXPECT_FALSE(a->options().decoupled_weight_decay);
  auto adamw = build_optimizer("adamw", {param({1, 2})}, o);
  ASSERT_NE(dynamic_cast<Adam*>(adamw.get()), nullptr);
  EXPECT_TRUE(dynamic_cast<Adam*>(adamw.get())->options().decoupled_weight_decay);
  // Settings Adam has no use for are errors rather than silently ignored.
  o.momentum = 0.9;
  const std::string m = error_of([&] { build_optimizer("adam", {param({1})}, o); });
  EXPECT_NE(m.find("momentum"), std::string::npos) << m;
  EXPECT_NE(m.find("beta1"), std::string::npos) << m;
  o.momentum = 0;
  o.beta2 = 1.0;
  EXPECT_NE(error_of([&] { build_optimizer("adamw", {param({1})}, o); }).find("beta2"), std::string::npos);
}

namespace {
// A weight matrix, a bias and another matrix, as in a small layer stack.
std::vector<Tensor> layer_like_params() {
  return {Tensor::from_vector(std::vector<float>{1, -2, 3, 4}, {2, 2}).set_requires_grad(true),
          param({0.5f, -0.5f}),
          Tensor::from_vector(std::vector<float>{2, 2}, {1, 2}).set_requires_grad(true)};
}
}  // namespace

TEST(OptimizerRegistry, NoDecay1dExemptsBiasesForSgdAndAdamW) {
  for (const std::string name : {"sgd", "adamw"}) {
    OptimizerOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.5;
    o.no_decay_1d = true;
    std::vector<Tensor> ps = layer_like_params();
    auto opt = build_optimizer(name, ps, o);
    ASSERT_EQ(opt->params().size(), 3u);
    EXPECT_TRUE(opt->params()[1].same(ps[1]));  // the original order is kept
    opt->set_lr(0.2);  // the rate reaches both groups
    for (int s = 0; s < 2; ++s) {
      for (auto& p : ps) p.set_grad(Tensor::zeros(p.shape()));
      opt->step();
    }
    // Zero loss gradient: only the decay acts, (1 - lr wd) per step on the 2-d parameters.
    const double f = (1 - 0.2 * 0.5) * (1 - 0.2 * 0.5);
    expect_near_vec(ps[0].to_vector(), {1 * f, -2 * f, 3 * f, 4 * f});
    EXPECT_EQ(ps[1].to_vector(), (std::vector<float>{0.5f, -0.5f})) << name;
    expect_near_vec(ps[2].to_vector(), {2 * f, 2 * f});
  }
  // Without the flag the bias decays too.
  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  std::vector<Tensor> ps = layer_like_params();
  auto opt = build_optimizer("sgd", ps, o);
  ps[1].set_grad(Tensor::zeros({2}));
  opt->step();
  expect_near_vec(ps[1].to_vector(), {0.5 * 0.95, -0.5 * 0.95});
}

TEST(OptimizerRegistry, NoDecay1dStateUsesTheOriginalIndices) {
  OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.1;
  o.no_decay_1d = true;
  auto run = [](Optimizer& opt, std::vector<Tensor>& ps, int steps) {
    for (int s = 0; s < steps; ++s) {
      for (auto& p : ps) p.set_grad(Tensor::from_vector(coupled_grad(p.to_vector()), p.shape()));
      opt.step();
    }
  };
  std::vector<Tensor> ps = layer_like_params();
  auto a = build_optimizer("sgd", ps, o);
  run(*a, ps, 2);
  StateDict saved;
  for (auto& [n, t] : a->state_dict()) saved.emplace_back(n, t.clone());
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[0].first, "momentum.0");
  EXPECT_EQ(saved[1].first, "momentum.1");
  EXPECT_EQ(saved[2].first, "momentum.2");
  EXPECT_EQ(saved[1].second.shape(), (Shape{2}));  // the bias's buffer, under the bias's index

  std::vector<Tensor> ps2;
  for (auto& p : ps) ps2.push_back(p.detach().clone().set_requires_grad(true));
  run(*a, ps, 2);
  auto b = build_optimizer("sgd", ps2, o);
  b->load_state_dict(saved);
  run(*b, ps2, 2);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(ps[i].to_vector(), ps2[i].to_vector()) << "param " << i;

  // Entries are checked against the original parameters, and the groups' messages say so.
  std::string m = error_of([&] { b->load_state_dict({{"momentum.7", Tensor::zeros({2})}}); });
  EXPECT_NE(m.find("only 3 parameters"), std::string::npos) << m;
  m = error_of([&] { b->load_state_dict({{"momentum.1", Tensor::zeros({2, 2})}}); });
  EXPECT_NE(m.find("shape"), std::string::npos) << m;
  EXPECT_NE(m.find("no_decay_1d"), std::string::npos) << m;
  m = error_of([&] { b->load_state_dict({{"velocity", Tensor::zeros({2})}}); });
  EXPECT_NE(m.find("velocity"), std::string::npos) << m;

  // Adam's three entries per parameter are renamed the same way.
  o.momentum = 0;
  std::vector<Tensor> ps3 = layer_like_params();
  auto c = build_optimizer("adamw", ps3, o);
  run(*c, ps3, 1);
  std::vector<std::string> names;
  for (auto& [n, t] : c->state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.0", "exp_avg_sq.0", "step.0", "exp_avg.1",
                                             "exp_avg_sq.1", "step.1", "exp_avg.2", "exp_avg_sq.2",
                                             "step.2"}));
}

// ---------------------------------------------------------------------------------------------
// The linear schedule

TEST(LrSchedule, LinearFallsToMinLr) {
  LrScheduleOptions o;
  o.type = "linear";
  o.base_lr = 0.5;
  o.min_lr = 0.1;
  o.total_epochs = 4;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.5);
  EXPECT_NEAR(s.lr_at(1), 0.4, 1e-15);
  EXPECT_NEAR(s.lr_at(2.5), 0.25, 1e-15);  // fractional epochs
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 0.1);  // stays at min_lr after the end
}

TEST(LrSchedule, LinearDecaysFromTheEndOfTheWarmup) {
  // BERT's shape: up to the peak over the warm-up, then straight down to 0 at the end.
  LrScheduleOptions o;
  o.type = "linear";
  o.base_lr = 1e-3;
  o.total_epochs = 10;
  o.warmup_epochs = 2;
  o.warmup_start_factor = 0.0;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_NEAR(s.lr_at(0.5), 0.25e-3, 1e-18);
  EXPECT_NEAR(s.lr_at(1.5), 0.75e-3, 1e-18);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 1e-3);       // the peak is reached
  EXPECT_NEAR(s.lr_at(4), 0.75e-3, 1e-18);  // 2 of the 8 decay epochs gone
  EXPECT_NEAR(s.lr_at(6), 0.5e-3, 1e-18);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.0);
}

TEST(LrSchedule, LinearBadOptionsNameTheField) {
  auto err = [](LrScheduleOptions o) { return error_of([&] { LrSchedule s(o); }); };
  LrScheduleOptions o;
  o.type = "linear";
  o.total_epochs = 5;
  o.warmup_epochs = 5;
  std::string m = err(o);
  EXPECT_NE(m.find("warmup_epochs"), std::string::npos) << m;
  EXPECT_NE(m.find("total_epochs"), std::string::npos) << m;
  o.warmup_epochs = 0;
  o.total_epochs = 0;
  EXPECT_NE(err(o).find("total_epochs"), std::string::npos);
  o.total_epochs = 5;
  o.min_lr = 1.0;  // above base_lr
  EXPECT_NE(err(o).find("min_lr"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// CUDA against CPU

TEST(AdamGpu, FusedKernelMatchesCpu) {
  MT_REQUIRE_GPU();
  // Over 2^16 elements, so the CPU side runs its OpenMP loop; odd, so no size is special.
  const Shape shape = {333, 301};
  for (bool decoupled : {false, true}) {
    AdamOptions o = adam_options(1e-2, 0.05, decoupled);
    Tensor pc = mt::testing::random_tensor(shape, 210), pg = pc.to(Device::cuda());
    pc.set_requires_grad(true);
    pg.set_requires_grad(true);
    Adam ac({pc}, o), ag({pg}, o);
    for (int step = 0; step < 3; ++step) {
      const Tensor g = mt::testing::random_tensor(shape, 211 + step);
      pc.set_grad(g);
      pg.set_grad(g.to(Device::cuda()));
      ac.step();
      ag.step();
    }
    EXPECT_TRUE(all_close(pg, pc, 1e-6, 1e-5)) << "decoupled " << decoupled;
    const auto st_c = ac.state_dict(), st_g = ag.state_dict();
    ASSERT_EQ(st_c.size(), st_g.size());
    for (size_t i = 0; i < st_c.size(); ++i) {
      EXPECT_EQ(st_c[i].first, st_g[i].first);
      if (st_c[i].second.dtype() == DType::Float32)
        EXPECT_TRUE(all_close(st_g[i].second, st_c[i].second, 1e-6, 1e-5)) << st_c[i].first;
      else
        EXPECT_EQ(st_g[i].second.item_int(), st_c[i].second.item_int());
    }
    // A CPU state dict loads onto the GPU optimizer (checkpoints are stored on the CPU).
    StateDict cpu_state;
    for (auto& [n, t] : st_c) cpu_state.emplace_back(n, t.clone());
    ag.load_state_dict(cpu_state);
    EXPECT_TRUE(ag.state_dict()[0].second.device().is_cuda());
  }
}

TEST(ClipGradNormGpu, MatchesCpu) {
  MT_REQUIRE_GPU();
  std::vector<Tensor> cpu, gpu;
  for (int k = 0; k < 4; ++k) {
    const Shape shape = {17 + k, 5};
    Tensor c = mt::testing::random_tensor(shape, 300 + k).set_requires_grad(true);
    Tensor g = c.to(Device::cuda()).set_requires_grad(true);
    const Tensor grad = mt::testing::random_tensor(shape, 400 + k, -3, 3);
    c.set_grad(grad);
    g.set_grad(grad.to(Device::cuda()));
    cpu.push_back(c);
    gpu.push_back(g);
  }
  const double nc = clip_grad_norm(cpu, 1.0), ng = clip_grad_norm(gpu, 1.0);
  EXPECT_NEAR(ng, nc, 1e-5 * nc);
  for (size_t k = 0; k < cpu.size(); ++k) EXPECT_TRUE(all_close(gpu[k].grad(), cpu[k].grad(), 1e-6, 1e-5));
}
