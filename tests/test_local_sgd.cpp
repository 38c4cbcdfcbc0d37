// Local SGD ("average every K steps", dist/local_sgd/local_sgd_synchronizer.h): the algorithm that shows a
// new algorithm needs no change outside dist/. Ranks run as forked processes on loopback Gloo
// and are compared with the same arithmetic done here, in double precision, for every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "core/error.h"
#include "dist/local_sgd/local_sgd_synchronizer.h"
#include "dist/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

namespace mt {
namespace {

using core::Tensor;
namespace fs = std::filesystem;

// One parameter vector w; the tests set its gradient by hand.
class VectorModel : public layers::Module {
 public:
  explicit VectorModel(std::vector<float> init) {
    w_ = register_parameter("w", Tensor::from_vector(init, {static_cast<int64_t>(init.size())}));
  }
  Tensor forward(const Tensor&) override { return w_; }
  std::string type_name() const override { return "VectorModel"; }
  Tensor w_;
};

const std::vector<float> kW0 = {1.0f, -2.0f, 0.5f, 3.0f};
constexpr double kLr = 0.2;

// Rank r minimizes s_r/2 |w - c_r|^2: the curvature differs between ranks, so K local steps
// followed by an average are not K steps on the averaged gradient (with one curvature for all
// ranks the two would agree, and the test could not tell local SGD from S-SGD).
double curvature(int rank) { return 1.0 + rank; }
std::vector<double> target(int rank) { return {1.0 + rank, -1.0 * rank, 0.5, 2.0 - rank}; }

void set_grad(const Tensor& w, int rank) {
  std::vector<float> g = w.to_vector();
  const auto c = target(rank);
  for (size_t j = 0; j < g.size(); ++j) g[j] = static_cast<float>(curvature(rank) * (g[j] - c[j]));
  Tensor(w).set_grad(Tensor::from_vector(g, w.shape()));
}

// Every rank's weights after `steps` steps of local SGD with period K (plain SGD at kLr).
std::vector<std::vector<double>> local_sgd_reference(int n, int period, int steps) {
  std::vector<std::vector<double>> w(n, std::vector<double>(kW0.begin(), kW0.end()));
  for (int t = 1; t <= steps; ++t) {
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < w[r].size(); ++j) w[r][j] -= kLr * curvature(r) * (w[r][j] - target(r)[j]);
    if (t % period != 0) continue;
    for (size_t j = 0; j < kW0.size(); ++j) {
      double mean = 0;
      for (int r = 0; r < n; ++r) mean += w[r][j] / n;
      for (int r = 0; r < n; ++r) w[r][j] = mean;
    }
  }
  return w;
}

// S-SGD (BSP) from the same start: one step a time on the averaged gradient.
std::vector<double> bsp_reference(int n, int steps) {
  std::vector<double> w(kW0.begin(), kW0.end());
  for (int t = 0; t < steps; ++t) {
    std::vector<double> g(w.size(), 0.0);
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < w.size(); ++j) g[j] += curvature(r) * (w[j] - target(r)[j]) / n;
    for (size_t j = 0; j < w.size(); ++j) w[j] -= kLr * g[j];
  }
  return w;
}

std::unique_ptr<optim::StepGuard> plain_sgd(const layers::Module& m) {
  optim::OptimizerOptions o;
  o.lr = kLr;
  return mt::testing::guarded(optim::build_optimizer("sgd", m.parameters(), o));
}

// Built through the registry, as the trainer builds it.
std::unique_ptr<dist::Synchronizer> local_sgd(const std::shared_ptr<dist::ProcessGroup>& group, int period) {
  mintrain::RunConfig run;
  run.mutable_dist()->set_algorithm("local_sgd");
  run.mutable_dist()->mutable_local_sgd()->set_period(period);
  return dist::make_synchronizer(group, run, "same");
}

TEST(LocalSgd, Gloo_EveryRankMatchesTheReferenceComputedHere) {
  for (int n : {2, 3}) {
    EXPECT_TRUE(mt::testing::run_ranks(n, [n](mt::testing::RankContext& ctx) {
      constexpr int kPeriod = 3;
      // Rank 0's start reaches every rank (setup broadcasts it).
      VectorModel model(ctx.rank == 0 ? kW0 : std::vector<float>{9, 9, 9, 9});
      auto opt = plain_sgd(model);
      auto sync = local_sgd(ctx.group, kPeriod);
      EXPECT_EQ(sync->name(), "local_sgd/every 3");
      sync->setup(model, *opt);
      // 8 steps: averages after steps 3 and 6, then two local steps that leave the ranks apart.
      for (int t = 0; t < 8; ++t) {
        sync->begin_iteration(t);
        set_grad(model.w_, ctx.rank);
        mt::testing::step(*sync, *opt);
        opt->zero_grad();
        const auto expected = local_sgd_reference(n, kPeriod, t + 1)[ctx.rank];
        const auto got = model.w_.to_vector();
        for (size_t j = 0; j < got.size(); ++j)
          EXPECT_NEAR(got[j], expected[j], 1e-5) << "rank " << ctx.rank << " step " << t + 1 << " j " << j;
      }
    }).ok_or_report()) << n << " ranks";
  }
}

// If local SGD were swapped for plain S-SGD (BSP), the weights after an averaging step would be
// the BSP reference; they are not, by far more than the tolerance of the test above.
TEST(LocalSgd, Gloo_IsNotPlainBsp) {
  constexpr int kPeriod = 3, kSteps = 6;
  const auto local = local_sgd_reference(2, kPeriod, kSteps)[0];
  const auto bsp = bsp_reference(2, kSteps);
  double apart = 0;
  for (size_t j = 0; j < bsp.size(); ++j) apart = std::max(apart, std::abs(local[j] - bsp[j]));
  ASSERT_GT(apart, 1e-2);  // the references themselves differ
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    VectorModel model(kW0);
    auto opt = plain_sgd(model);
    auto sync = local_sgd(ctx.group, kPeriod);
    sync->setup(model, *opt);
    for (int t = 0; t < kSteps; ++t) {
      sync->begin_iteration(t);
      set_grad(model.w_, ctx.rank);
      mt::testing::step(*sync, *opt);
      opt->zero_grad();
    }
    const auto got = model.w_.to_vector();
    double from_bsp = 0;
    for (size_t j = 0; j < got.size(); ++j) from_bsp = std::max(from_bsp, std::abs(got[j] - bsp[j]));
    EXPECT_GT(from_bsp, 1e-2) << "rank " << ctx.rank << " ended at the S-SGD weights";
  }).ok_or_report());
}

// Evaluation shows the world average between two averaging steps and gives the local weights
// back at the next iteration, so evaluating does not change training.
TEST(LocalSgd, Gloo_EvaluationShowsTheAverageAndTrainingGoesOnLocally) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    VectorModel model(kW0);
    auto opt = plain_sgd(model);
    auto sync = local_sgd(ctx.group, 4);
    sync->setup(model, *opt);
    sync->begin_iteration(0);
    set_grad(model.w_, ctx.rank);
    mt::testing::step(*sync, *opt);
    opt->zero_grad();
    const auto mine = model.w_.to_vector();
    const auto ranks = local_sgd_reference(2, 4, 1);
    sync->prepare_eval(model);
    const auto shown = model.w_.to_vector();
    for (size_t j = 0; j < shown.size(); ++j) EXPECT_NEAR(shown[j], (ranks[0][j] + ranks[1][j]) / 2, 1e-5);
    sync->begin_iteration(1);
    EXPECT_EQ(model.w_.to_vector(), mine);
  }).ok_or_report());
}

TEST(LocalSgd, Gloo_BadPeriodNamesTheField) {
  EXPECT_TRUE(mt::testing::run_ranks(1, [](mt::testing::RankContext& ctx) {
    const std::string e = mt::testing::error_of([&] { local_sgd(ctx.group, 0); });
    EXPECT_TRUE(mt::testing::contains(e, "dist.local_sgd.period must be >= 1")) << e;
  }).ok_or_report());
}

// The trainer runs it from the config alone (dist.algorithm and dist.local_sgd), and learns.
TEST(LocalSgd, Gloo_TrainerLearnsOnTwoRanks) {
  const fs::path dir = fs::temp_directory_path() / ("mt_local_sgd_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    std::ostringstream log0;
    auto tally = std::make_shared<mt::testing::Tally>();
    auto world = std::make_shared<mt::testing::CountingGroup>(ctx.group, mt::testing::world_members(2), tally);
    const double acc = mt::testing::train_synthetic_mlp(
        world, ctx.rank, (dir / "out").string(), {"dist.algorithm=local_sgd", "dist.local_sgd.period=4"}, log0);
    if (ctx.rank == 0) {
      EXPECT_GT(acc, 60.0) << log0.str();
      // What S-SGD would not do: 192 steps, a world average every 4th (48), not every step.
      EXPECT_GE(tally->of("allreduce {0,1}"), 48);
      EXPECT_LT(tally->of("allreduce {0,1}"), 96);
      EXPECT_TRUE(mt::testing::contains(log0.str(), "local_sgd/every 4")) << log0.str();
    }
  }, mo).ok_or_report());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mt
