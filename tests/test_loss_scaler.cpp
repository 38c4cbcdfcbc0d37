// Loss scaling (optim/loss_scaler.h) and its place in the step guard and the trainer: growth
// after growth_interval good steps, backoff and a skipped step on Inf/NaN gradients (not counted
// as a bad step unless the scale is at its floor), exact unscaling with clipping folded in, the
// state round trip, config validation, and float16 training end to end on the synthetic MLP
// whose checkpoints keep the scale.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/precision.h"
#include "core/serialize.h"
#include "optim/loss_scaler.h"
#include "optim/registry.h"
#include "optim/step_guard.h"
#include "support/test_helpers.h"

namespace mt {
namespace {

using core::Tensor;
using optim::DynamicLossScaler;
using optim::LossScalerOptions;
using testing::contains;
using testing::error_of;
namespace fs = std::filesystem;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor param(const std::vector<float>& v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.set_requires_grad(true);
  return p;
}

void set_grad(Tensor& p, const std::vector<float>& g) {
  p.set_grad(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
}

LossScalerOptions options(double init, int64_t interval, bool dynamic = true) {
  LossScalerOptions o;
  o.dynamic = dynamic;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

std::unique_ptr<optim::StepGuard> guarded_sgd(std::vector<Tensor> params, double lr, double max_norm,
                                              const LossScalerOptions& so, double momentum = 0.0) {
  optim::OptimizerOptions o;
  o.lr = lr;
  o.momentum = momentum;
  return std::make_unique<optim::StepGuard>(optim::build_optimizer("sgd", std::move(params), o), max_norm,
                                            std::make_unique<DynamicLossScaler>(so));
}

// ---------------------------------------------------------------- the scaler alone

TEST(LossScaler, GrowsAfterGrowthIntervalGoodSteps) {
  DynamicLossScaler s(options(8, 3));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  EXPECT_EQ(s.good_steps(), 2);
  s.update(false);
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.good_steps(), 0) << "the count restarts after growing";
  // An overflow restarts the count: three more good steps are needed.
  s.update(false);
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.overflow_steps(), 1);
}

TEST(LossScaler, BacksOffOnOverflowButNotBelowTheFloor) {
  LossScalerOptions o = options(4, 100);
  o.backoff_factor = 0.25;
  DynamicLossScaler s(o);
  EXPECT_FALSE(s.at_minimum());
  s.update(true);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_TRUE(s.at_minimum());
  s.update(true);
  EXPECT_EQ(s.scale(), 1) << "min_scale 1 is the floor";
  EXPECT_EQ(s.overflow_steps(), 2);
  // A run that starts below the floor keeps its own scale as the floor.
  DynamicLossScaler low(options(0.5, 10));
  EXPECT_TRUE(low.at_minimum());
  low.update(true);
  EXPECT_EQ(low.scale(), 0.5);
}

TEST(LossScaler, StaticNeverChanges) {
  DynamicLossScaler s(options(128, 1, /*dynamic=*/false));
  EXPECT_TRUE(s.at_minimum()) << "an overflow cannot lower a static scale";
  s.update(false);
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.overflow_steps(), 1);
}

TEST(LossScaler, UnscalesExactlyInPlace) {
  Tensor a = param({0, 0, 0}), b = param({0}), c = param({1});  // c has no gradient
  set_grad(a, {2048, -4096, 0.5f});
  set_grad(b, {3 * 1024.0f});
  DynamicLossScaler s(options(1024, 10));
  s.unscale({a, b, c});
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, -4, 0.00048828125f}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{3}));
  EXPECT_FALSE(c.grad().defined());
  s.unscale({a}, /*extra_factor=*/0.5 * 1024);  // extra factor times 1/scale: x 0.5
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{1, -2, 0.000244140625f}));
  // A non-contiguous gradient is replaced by a contiguous unscaled copy.
  Tensor m = Tensor::from_vector(std::vector<float>{0, 0, 0, 0}, {2, 2}).set_requires_grad(true);
  m.set_grad(Tensor::from_vector(std::vector<float>{1024, 2048, 3072, 4096}, {2, 2}).transpose(0, 1));
  s.unscale({m});
  EXPECT_EQ(m.grad().to_vector(), (std::vector<float>{1, 3, 2, 4}));
}

TEST(LossScaler, DetectsNonFiniteGradients) {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {1e30f, -1e30f});  // large, finite: the norm is summed in double
  set_grad(b, {1});
  EXPECT_TRUE(DynamicLossScaler::grads_finite({a, b}));
  for (float bad : {kInf, -kInf, kNaN}) {
    set_grad(b, {bad});
    EXPECT_FALSE(DynamicLossScaler::grads_finite({a, b})) << bad;
  }
}

TEST(LossScaler, StateRoundTrips) {
  DynamicLossScaler s(options(65536, 3));
  s.update(true);
  s.update(false);
  s.update(false);
  const optim::LossScalerState st = s.state_dict();
  EXPECT_EQ(st.scale, 32768);
  EXPECT_EQ(st.good_steps, 2);
  EXPECT_EQ(st.overflow_steps, 1);
  DynamicLossScaler t(options(65536, 3));
  t.load_state_dict(st);
  EXPECT_EQ(t.scale(), 32768);
  EXPECT_EQ(t.good_steps(), 2);
  t.update(false);  // the restored count finishes the interval
  EXPECT_EQ(t.scale(), 65536);
  EXPECT_TRUE(contains(error_of([&] { t.load_state_dict({-1.0, 0, 0}); }), "invalid loss-scaler state"));
  // A static scaler keeps its configured scale.
  DynamicLossScaler fixed(options(256, 3, false));
  fixed.load_state_dict(st);
  EXPECT_EQ(fixed.scale(), 256);
}

TEST(LossScaler, BadOptionsAreErrors) {
  LossScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_TRUE(contains(error_of([&] { DynamicLossScaler s(o); }), "growth_factor"));
  o = {};
  o.backoff_factor = 1.0;
  EXPECT_TRUE(contains(error_of([&] { DynamicLossScaler s(o); }), "backoff_factor"));
  o = {};
  o.init_scale = 0;
  EXPECT_TRUE(contains(error_of([&] { DynamicLossScaler s(o); }), "init_scale"));
  o = {};
  o.growth_interval = 0;
  EXPECT_TRUE(contains(error_of([&] { DynamicLossScaler s(o); }), "growth_interval"));
}

// ---------------------------------------------------------------- in the step guard

TEST(LossScaledStep, UnscalesClipsAndStepsLikeAnUnscaledRun) {
  Tensor a = param({1, 1}), b = param({1});
  auto opt = guarded_sgd({a, b}, /*lr=*/1.0, /*max_norm=*/1.0, options(1024, 100));
  EXPECT_EQ(opt->loss_scale(), 1024);
  set_grad(a, {3 * 1024.0f, 0});  // the unscaled gradient is (3, 0), (4): norm 5
  set_grad(b, {4 * 1024.0f});
  opt->step();
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_FALSE(opt->last_step_overflowed());
  EXPECT_DOUBLE_EQ(opt->last_grad_norm(), 5.0) << "the unscaled norm";
  // Clipped to norm 1: the update is (0.6, 0) and 0.8, as in the unscaled guard's test.
  EXPECT_NEAR(a.to_vector()[0], 1.0f - 0.6f, 1e-6);
  EXPECT_NEAR(a.to_vector()[1], 1.0f, 1e-6);
  EXPECT_NEAR(b.to_vector()[0], 1.0f - 0.8f, 1e-6);
  EXPECT_EQ(opt->loss_scaler()->good_steps(), 1);
}

TEST(LossScaledStep, OverflowSkipsTheStepLowersTheScaleAndIsNotABadStep) {
  Tensor a = param({1, 2});
  auto opt = guarded_sgd({a}, 0.1, 0.0, options(65536, 100), /*momentum=*/0.9);
  set_grad(a, {65536, 65536});
  opt->step();  // a good step: creates the momentum buffer
  const auto weights = a.to_vector();
  const core::StateDict before = opt->state_dict();
  double scale = 65536;
  for (float bad : {kInf, kNaN, -kInf}) {
    set_grad(a, {bad, 1});
    opt->step();
    scale /= 2;
    EXPECT_TRUE(opt->last_step_skipped());
    EXPECT_TRUE(opt->last_step_overflowed()) << bad;
    EXPECT_EQ(opt->loss_scale(), scale);
    EXPECT_EQ(a.to_vector(), weights) << "weights untouched";
  }
  EXPECT_EQ(opt->skipped_steps(), 0) << "overflows are not bad steps";
  EXPECT_EQ(opt->loss_scaler()->overflow_steps(), 3);
  const core::StateDict after = opt->state_dict();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(before[i].second.to_vector(), after[i].second.to_vector()) << "optimizer state untouched";
  // A finite step afterwards goes through at the lowered scale.
  set_grad(a, {static_cast<float>(scale), 0});
  opt->step();
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_NE(a.to_vector(), weights);
}

TEST(LossScaledStep, OverflowAtTheFloorIsABadStep) {
  Tensor a = param({1});
  auto opt = guarded_sgd({a}, 0.1, 0.0, options(2, 100));
  set_grad(a, {kInf});
  opt->step();  // 2 -> 1
  EXPECT_TRUE(opt->last_step_overflowed());
  EXPECT_EQ(opt->skipped_steps(), 0);
  set_grad(a, {kInf});
  opt->step();  // at the floor: nothing left to lower
  EXPECT_TRUE(opt->last_step_skipped());
  EXPECT_FALSE(opt->last_step_overflowed());
  EXPECT_EQ(opt->skipped_steps(), 1);
  EXPECT_EQ(opt->loss_scale(), 1);
}

// ---------------------------------------------------------------- config

TEST(LossScaleConfig, FieldsAreValidated) {
  const std::string base = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  struct Case {
    const char* set;
    const char* field;
  };
  for (const Case& c : {Case{"loss_scale.mode=sometimes", "loss_scale.mode"},
                        Case{"loss_scale.init_scale=0", "loss_scale.init_scale"},
                        Case{"loss_scale.init_scale=nan", "loss_scale.init_scale"},
                        Case{"loss_scale.growth_factor=1", "loss_scale.growth_factor"},
                        Case{"loss_scale.backoff_factor=1.5", "loss_scale.backoff_factor"},
                        Case{"loss_scale.backoff_factor=0", "loss_scale.backoff_factor"},
                        Case{"loss_scale.growth_interval=0", "loss_scale.growth_interval"},
                        Case{"precision=half", "precision"},
                        Case{"cuda.cudnn_workspace_mb=-5", "cuda.cudnn_workspace_mb"}}) {
    EXPECT_TRUE(contains(error_of([&] { apps::load_run_config(base, {c.set}); }), c.field)) << c.set;
  }
  EXPECT_NO_THROW(apps::load_run_config(base, {"precision=fp16", "loss_scale.mode=static"}));
}

// ---------------------------------------------------------------- the trainer, end to end

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(testing::make_temp_dir("mt_loss_scaler")) / name;
  fs::create_directories(d);
  return d;
}

apps::RunConfig fp16_config(const fs::path& out, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"precision=fp16", "threads=1", "output_dir=" + out.string()};
  all.insert(all.end(), sets.begin(), sets.end());
  return apps::load_run_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt", all);
}

// Training sets the process-wide precision; later tests must see float32 again.
struct RestorePrecision {
  ~RestorePrecision() { core::set_compute_precision(core::ComputePrecision::FP32); }
};

TEST(LossScaledTraining, Fp16MlpLearnsThroughOverflowsAndCheckpointsTheScale) {
  RestorePrecision restore;
  const fs::path out = fresh_dir("fp16");
  // A scale far too large for float16 (the first backward overflows) and a short growth
  // interval: the run has to back off, then keeps probing upwards, overflowing now and then.
  std::ostringstream log;
  apps::TrainerOptions to;
  to.log = &log;
  apps::Trainer t(fp16_config(out, {"loss_scale.init_scale=1073741824", "loss_scale.growth_interval=20"}), to);
  EXPECT_EQ(core::compute_precision(), core::ComputePrecision::FP16);
  ASSERT_NE(t.loss_scaler(), nullptr) << "fp16 scales the loss by default";
  EXPECT_TRUE(t.loss_scaler()->dynamic());
  const apps::TrainResult r = t.train();  // on_nonfinite "stop": an overflow counted as bad would throw
  EXPECT_FALSE(r.interrupted);
  EXPECT_GT(r.last_eval.accuracy, 50.0) << "10 classes: chance is 10%";
  const optim::LossScalerState st = t.loss_scaler()->state_dict();
  EXPECT_GE(st.overflow_steps, 5) << "2^30 is far above what float16 holds";
  EXPECT_LT(st.scale, 1073741824.0);
  EXPECT_GE(st.scale, 1.0);
  EXPECT_TRUE(contains(log.str(), "precision fp16, dynamic loss scale 1.07374e+09")) << log.str();
  EXPECT_TRUE(contains(log.str(), "epoch 3 loss scale ")) << log.str();
  EXPECT_TRUE(contains(log.str(), "steps skipped for overflow")) << log.str();
  EXPECT_FALSE(contains(log.str(), "warning:")) << "no bad steps";

  // The last checkpoint holds the final scale, as text in its metadata.
  ASSERT_FALSE(r.last_checkpoint.empty());
  const apps::TrainingState saved = apps::load_checkpoint(r.last_checkpoint, nullptr, nullptr, nullptr);
  ASSERT_TRUE(saved.loss_scale.has_value());
  EXPECT_EQ(saved.loss_scale->scale, st.scale);
  EXPECT_EQ(saved.loss_scale->good_steps, st.good_steps);
  EXPECT_EQ(saved.loss_scale->overflow_steps, st.overflow_steps);
  EXPECT_EQ(core::load_archive(r.last_checkpoint).meta.count("loss_scale"), 1u);

  // Resuming restores it (instead of starting again from init_scale).
  apps::TrainerOptions quiet;
  quiet.quiet = true;
  apps::Trainer resumed(fp16_config(out, {"loss_scale.init_scale=1073741824", "loss_scale.growth_interval=20"}),
                        quiet);
  resumed.resume(r.last_checkpoint);
  EXPECT_EQ(resumed.loss_scaler()->scale(), st.scale);
  EXPECT_EQ(resumed.loss_scaler()->overflow_steps(), st.overflow_steps);
}

TEST(LossScaledTraining, CheckpointsWithoutAScaleStillLoad) {
  RestorePrecision restore;
  const fs::path out = fresh_dir("fp32_then_fp16");
  apps::TrainerOptions quiet;
  quiet.quiet = true;
  // A float32 run: no scaler, and its checkpoints have no scale. (Its trainer goes out of scope
  // before the next one starts: a live trainer holds the output folder's lock.)
  apps::TrainResult r;
  {
    apps::Trainer plain(apps::load_run_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt",
                                              {"threads=1", "epochs=1", "output_dir=" + out.string()}),
                        quiet);
    EXPECT_EQ(plain.loss_scaler(), nullptr);
    r = plain.train();
  }
  ASSERT_FALSE(r.last_checkpoint.empty());
  EXPECT_FALSE(apps::load_checkpoint(r.last_checkpoint, nullptr, nullptr, nullptr).loss_scale.has_value());
  EXPECT_EQ(core::load_archive(r.last_checkpoint).meta.count("loss_scale"), 0u);
  // ...which a float16 run resumes from, starting at init_scale, and trains on.
  apps::Trainer fp16(fp16_config(out, {"epochs=2", "loss_scale.init_scale=4096"}), quiet);
  fp16.resume(r.last_checkpoint);
  EXPECT_EQ(fp16.loss_scaler()->scale(), 4096);
  const apps::TrainResult r2 = fp16.train();
  EXPECT_EQ(r2.iterations, 2 * fp16.iterations_per_epoch());
  EXPECT_TRUE(apps::load_checkpoint(r2.last_checkpoint, nullptr, nullptr, nullptr).loss_scale.has_value());
}

TEST(LossScaledTraining, OnlyFp16ScalesByDefault) {
  RestorePrecision restore;
  apps::TrainerOptions quiet;
  quiet.quiet = true;
  const fs::path out = fresh_dir("defaults");
  const std::string base = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  {
    apps::Trainer bf16(apps::load_run_config(base, {"precision=bf16", "output_dir=" + out.string()}), quiet);
    EXPECT_EQ(core::compute_precision(), core::ComputePrecision::BF16);
    EXPECT_EQ(bf16.loss_scaler(), nullptr);
  }
  {
    apps::Trainer fp16_none(
        apps::load_run_config(base, {"precision=fp16", "loss_scale.mode=none", "output_dir=" + out.string()}), quiet);
    EXPECT_EQ(fp16_none.loss_scaler(), nullptr);
  }
  {
    apps::Trainer fp32_static(
        apps::load_run_config(base, {"loss_scale.mode=static", "loss_scale.init_scale=8", "output_dir=" + out.string()}),
        quiet);
    EXPECT_EQ(core::compute_precision(), core::ComputePrecision::FP32);
    ASSERT_NE(fp32_static.loss_scaler(), nullptr) << "an explicit mode applies to any precision";
    EXPECT_FALSE(fp32_static.loss_scaler()->dynamic());
    EXPECT_EQ(fp32_static.loss_scaler()->scale(), 8);
  }
}

TEST(LossScaledTraining, ANonFiniteLossIsStillABadStep) {
  RestorePrecision restore;
  const fs::path out = fresh_dir("diverges");
  apps::TrainerOptions quiet;
  quiet.quiet = true;
  // A learning rate that blows the weights up: the loss becomes Inf/NaN, which loss scaling
  // must not hide; on_nonfinite "stop" ends the run with the iteration named.
  apps::Trainer t(fp16_config(out, {"optimizer.lr=1e30", "optimizer.momentum=0"}), quiet);
  const std::string msg = error_of([&] { t.train(); });
  EXPECT_TRUE(contains(msg, "iteration")) << msg;
  EXPECT_TRUE(contains(msg, "on_nonfinite")) << msg;
}

}  // namespace
}  // namespace mt
