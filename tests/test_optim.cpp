// Optimizers, learning-rate schedules and gradient clipping: SGD's variants against closed
// forms, convergence on least squares, resuming from a state dict, and option validation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/random.h"
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
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"sgd"}));
  std::string msg = error_of([&] { build_optimizer("adamw", {a}, o); });
  EXPECT_NE(msg.find("adamw"), std::string::npos);
  EXPECT_NE(msg.find("sgd"), std::string::npos);
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
  EXPECT_EQ(lr_schedule_types(), (std::vector<std::string>{"constant", "step", "multistep", "cosine"}));
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
