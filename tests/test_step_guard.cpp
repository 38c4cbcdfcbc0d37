// The optimizer step guard (optim/step_guard.h) and what the trainer does with it: NaN/Inf
// gradients skip the step (on_nonfinite: stop | skip), gradient clipping by global norm, and
// the collective stop decision of distributed runs (a signal that reaches one rank stops all
// ranks at the same iteration).
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "optim/registry.h"
#include "optim/clip_grad.h"
#include "optim/step_guard.h"
#include "support/multiprocess.h"

namespace mt {
namespace {

using core::Tensor;
namespace fs = std::filesystem;

Tensor param(const std::vector<float>& v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.set_requires_grad(true);
  return p;
}

std::unique_ptr<optim::StepGuard> guarded_sgd(std::vector<Tensor> params, double lr, double max_norm,
                                              double momentum = 0.0) {
  optim::OptimizerOptions o;
  o.lr = lr;
  o.momentum = momentum;
  return std::make_unique<optim::StepGuard>(optim::build_optimizer("sgd", std::move(params), o), max_norm);
}

TEST(StepGuard, GlobalNormCoversAllParameters) {
  Tensor a = param({0, 0}), b = param({0, 0, 0});
  a.set_grad(Tensor::from_vector(std::vector<float>{3, 0}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<float>{0, 4, 0}, {3}));
  Tensor c = param({1});  // no gradient: skipped
  EXPECT_DOUBLE_EQ(optim::global_grad_norm({a, b, c}), 5.0);
}

TEST(StepGuard, ClipsToMaxNormThenSteps) {
  Tensor a = param({1, 1}), b = param({1});
  a.set_grad(Tensor::from_vector(std::vector<float>{3, 0}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<float>{4}, {1}));
  auto opt = guarded_sgd({a, b}, /*lr=*/1.0, /*max_norm=*/1.0);
  opt->step();
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_DOUBLE_EQ(opt->last_grad_norm(), 5.0);
  // Scaled by 1/5: the update is (0.6, 0) and 0.8.
  EXPECT_NEAR(a.to_vector()[0], 1.0f - 0.6f, 1e-6);
  EXPECT_NEAR(a.to_vector()[1], 1.0f, 1e-6);
  EXPECT_NEAR(b.to_vector()[0], 1.0f - 0.8f, 1e-6);
}

TEST(StepGuard, BelowMaxNormIsUntouched) {
  Tensor a = param({1});
  a.set_grad(Tensor::from_vector(std::vector<float>{0.5f}, {1}));
  auto opt = guarded_sgd({a}, 1.0, 1.0);
  opt->step();
  EXPECT_NEAR(a.to_vector()[0], 0.5f, 1e-7);
}

TEST(StepGuard, NonFiniteGradientSkipsTheStepAndKeepsState) {
  Tensor a = param({1, 2});
  auto opt = guarded_sgd({a}, 0.1, 0.0, /*momentum=*/0.9);
  a.set_grad(Tensor::from_vector(std::vector<float>{1, 1}, {2}));
  opt->step();  // creates the momentum buffer
  const auto weights = a.to_vector();
  const core::StateDict before = opt->state_dict();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    a.set_grad(Tensor::from_vector(std::vector<float>{bad, 1}, {2}));
    opt->step();
    EXPECT_TRUE(opt->last_step_skipped());
    EXPECT_FALSE(std::isfinite(opt->last_grad_norm()));
    EXPECT_EQ(a.to_vector(), weights) << "a skipped step must not touch the weights";
  }
  EXPECT_EQ(opt->skipped_steps(), 2);
  const core::StateDict after = opt->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].second.to_vector(), before[i].second.to_vector());
  // A finite gradient afterwards steps again.
  a.set_grad(Tensor::from_vector(std::vector<float>{1, 1}, {2}));
  opt->step();
  EXPECT_FALSE(opt->last_step_skipped());
  EXPECT_NE(a.to_vector(), weights);
}

TEST(StepGuard, LearningRateReachesTheWrappedOptimizer) {
  Tensor a = param({1});
  auto opt = guarded_sgd({a}, 1.0, 0.0);
  opt->set_lr(0.25);
  a.set_grad(Tensor::from_vector(std::vector<float>{1}, {1}));
  opt->step();
  EXPECT_NEAR(a.to_vector()[0], 0.75f, 1e-7);
}

TEST(StepGuard, NegativeMaxNormIsAnError) {
  Tensor a = param({1});
  optim::OptimizerOptions o;
  EXPECT_THROW(optim::StepGuard(optim::build_optimizer("sgd", {a}, o), -1.0), core::Error);
}

apps::RunConfig diverging_config(const std::string& out, const std::string& on_nonfinite) {
  apps::RunConfig c = apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  c.set_output_dir(out);
  // A learning rate this large overflows float32 within a few steps.
  apps::apply_override(c, "optimizer.lr=1e30");
  apps::apply_override(c, "optimizer.momentum=0");
  apps::apply_override(c, "on_nonfinite=" + on_nonfinite);
  apps::apply_override(c, "checkpoint.every_iters=1");
  apps::validate_config(c);
  return c;
}

TEST(TrainerNonFinite, StopNamesTheIterationAndKeepsCheckpoints) {
  const std::string out = ::testing::TempDir() + "/nonfinite_stop";
  fs::remove_all(out);
  std::ostringstream log;
  apps::TrainerOptions opt;
  opt.log = &log;
  apps::Trainer t(diverging_config(out, "stop"), opt);
  std::string msg;
  try {
    t.train();
    FAIL() << "training with lr 1e30 should have hit a non-finite gradient";
  } catch (const core::Error& e) {
    msg = e.what();
    EXPECT_NE(msg.find("iteration "), std::string::npos) << msg;
    EXPECT_NE(msg.find("gradient norm is"), std::string::npos) << msg;
    EXPECT_NE(msg.find("on_nonfinite"), std::string::npos) << msg;
  }
  // The checkpoints written before the bad step are still there and loadable.
  const auto files = apps::CheckpointDir::list(out + "/checkpoints");
  ASSERT_FALSE(files.empty());
  const apps::TrainingState last_good = apps::load_checkpoint(files.back(), nullptr, nullptr, nullptr);
  // A checkpoint follows every good step, so the step that failed is the one after the newest
  // checkpoint's, counted from 1 as the progress lines count.
  const std::string named = "iteration " + std::to_string(last_good.global_iteration + 1) + ":";
  EXPECT_NE(msg.find(named), std::string::npos) << "expected \"" << named << "\" in: " << msg;
}

TEST(TrainerNonFinite, SkipWarnsAndGivesUpAfterTenInARow) {
  const std::string out = ::testing::TempDir() + "/nonfinite_skip";
  fs::remove_all(out);
  std::ostringstream log;
  apps::TrainerOptions opt;
  opt.log = &log;
  apps::Trainer t(diverging_config(out, "skip"), opt);
  try {
    t.train();
    FAIL() << "the weights stay huge, so every later step overflows too";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("10 steps in a row"), std::string::npos) << e.what();
  }
  EXPECT_NE(log.str().find("step skipped"), std::string::npos) << log.str();
}

// Trains `c` as this rank until the end or until the ranks agree to stop (`stop` asks for it).
apps::TrainResult train_until_stopped(testing::RankContext& ctx, apps::RunConfig c, const std::atomic<bool>& stop) {
  apps::validate_config(c);
  std::ostringstream log;
  apps::TrainerOptions opt;
  opt.group = ctx.group;
  opt.log = &log;
  opt.stop_flag = &stop;
  apps::Trainer t(c, opt);
  return t.train();
}

// Rank 0 alone is asked to stop (as when a signal reaches one process first): every rank must
// stop at the same iteration, instead of the others waiting in the next allreduce.
TEST(TrainerStop, OneRankAskingStopsAllRanks) {
  const std::string out = ::testing::TempDir() + "/stop_agree";
  fs::remove_all(out);
  auto result = testing::run_ranks(2, [&](testing::RankContext& ctx) {
    apps::RunConfig c = apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
    c.set_output_dir(out);
    std::atomic<bool> stop{ctx.rank == 0};
    const apps::TrainResult r = train_until_stopped(ctx, c, stop);
    EXPECT_TRUE(r.interrupted);
    // Both ranks after the same iteration: the vote cast before iteration 1 is counted before
    // iteration 2 (a vote is counted at the next one, so it never waits behind an exchange, and
    // the first interval is one iteration).
    EXPECT_EQ(r.iterations, 1);
    if (ctx.rank == 0) {
      EXPECT_FALSE(r.last_checkpoint.empty());
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// Votes are taken about once a second (rank 0 sets the interval in iterations), so a stop asked
// for in the middle of a fast run, by one rank, at any moment, must still stop every rank after
// the same iteration and well before the run's end.
TEST(TrainerStop, AStopAskedMidRunStopsAllRanksAtTheSameIteration) {
  const std::string out = ::testing::TempDir() + "/stop_mid_run";
  fs::remove_all(out);
  auto result = testing::run_ranks(2, [&](testing::RankContext& ctx) {
    apps::RunConfig c = apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
    c.set_output_dir(out);
    c.set_epochs(2000);  // 64,000 iterations: minutes, unless the stop works
    c.mutable_checkpoint()->set_every_epochs(0);
    std::atomic<bool> stop{false};
    std::thread asker;
    if (ctx.rank == 1) asker = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      stop = true;
    });
    const apps::TrainResult r = train_until_stopped(ctx, c, stop);
    if (asker.joinable()) asker.join();
    EXPECT_TRUE(r.interrupted);
    EXPECT_GT(r.iterations, 1);  // votes went on after the first ones
    EXPECT_LT(r.iterations, 2000 * 32);
    // The same iteration on both ranks (each rank is its own process: they compare by a sum).
    auto both = core::Tensor::from_vector(std::vector<float>{static_cast<float>(r.iterations)}, {1});
    ctx.group->allreduce(both)->wait();
    EXPECT_EQ(both.item(), 2.0f * static_cast<float>(r.iterations));
  });
  EXPECT_TRUE(result.ok_or_report());
}

}  // namespace
}  // namespace mt
