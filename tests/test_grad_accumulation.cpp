// Gradient accumulation without communication (dist.grad_accumulation_steps = k), through every
// synchronizer the trainer builds from a config (the parameter server's own tests have their
// servers): k micro-batches of b rows end with the weights of one micro-batch of k x b rows,
// and the earlier micro-batches' backward issues no collective.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "apps/config.h"
#include "core/ops/nn.h"
#include "core/runtime.h"
#include "dist/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

namespace mt {
namespace {

using core::Tensor;

constexpr int kRanks = 4, kSteps = 3;
constexpr int64_t kImage = 4, kClasses = 3, kRowsPerRank = 8;

int issued(testing::Tally& tally) {
  std::lock_guard<std::mutex> lock(tally.mutex);
  return std::accumulate(tally.issued.begin(), tally.issued.end(), 0,
                         [](int n, const auto& e) { return n + e.second; });
}

// This rank's weights after kSteps steps of `micro` micro-batches (its kRowsPerRank rows of
// each step's batch, cut in `micro`), under `dist_text`; `quiet` counts the earlier
// micro-batches of the first step whose backward issued no collective.
std::vector<std::vector<float>> train(testing::RankContext& c, const std::string& dist_text, int micro, int* quiet) {
  const apps::RunConfig run = apps::parse_config(
      "dist { " + dist_text + " grad_accumulation_steps: " + std::to_string(micro) + " }", "test");
  auto tally = std::make_shared<testing::Tally>();
  auto world = std::make_shared<testing::CountingGroup>(c.group, testing::world_members(kRanks), tally);
  auto sync = dist::make_synchronizer(world, run, "same config");
  auto model = testing::tiny_mlp(7, kImage, kClasses);
  optim::OptimizerOptions o;
  o.lr = 0.1;
  auto opt = testing::guarded(optim::build_optimizer("sgd", model->parameters(), o));
  sync->setup(*model, *opt);
  const int64_t rows = kRowsPerRank / micro;
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = testing::synthetic_batch(s, kRanks * kRowsPerRank, kImage, kClasses);
    for (int m = 0; m < micro; ++m) {
      sync->begin_iteration(s);
      const int64_t first = c.rank * kRowsPerRank + m * rows;
      const Tensor loss = core::cross_entropy(model->forward(x.narrow(0, first, rows).contiguous()),
                                              y.narrow(0, first, rows).contiguous());
      const int before = issued(*tally);
      loss.backward(Tensor::full(loss.shape(), 1.0 / micro));
      if (s == 0 && m + 1 < micro && issued(*tally) == before) ++*quiet;
    }
    testing::step(*sync, *opt);
    opt->zero_grad();
  }
  sync->prepare_eval(*model);  // ByteScheduler's last updates are applied here
  return testing::weights_of(*model);
}

}  // namespace

TEST(GradAccumulation, EveryAlgorithmStepsOnceOnTheAccumulatedGradientOfItsMicroBatches) {
  for (const std::string dist_text : {
           "algorithm: \"ssgd\" ssgd { allreduce: \"hierarchical\" ranks_per_rack: 2 }",
           "algorithm: \"cdsgd\" cdsgd { warmup_iters: 1 }",  // then the delayed, compensated steps
           "algorithm: \"dssync\"",
           "algorithm: \"local_sgd\" local_sgd { period: 2 }",
           "algorithm: \"bytescheduler\"",
           "algorithm: \"dlcp\" dlcp { loss_bound: 0 }",
       }) {
    const auto result = testing::run_ranks(kRanks, [&](testing::RankContext& c) {
      core::set_num_threads(1);
      int quiet_whole = 0, quiet = 0;
      const auto whole = train(c, dist_text, 1, &quiet_whole);
      const auto parts = train(c, dist_text, 2, &quiet);
      EXPECT_EQ(quiet, 1) << "the first micro-batch's backward communicated";
      ASSERT_EQ(parts.size(), whole.size());
      for (size_t p = 0; p < whole.size(); ++p)
        for (size_t i = 0; i < whole[p].size(); ++i)
          ASSERT_NEAR(parts[p][i], whole[p][i], 2e-5 + 2e-4 * std::abs(whole[p][i])) << "param " << p << "[" << i << "]";
    });
    EXPECT_TRUE(result.ok_or_report()) << dist_text;
  }
}

}  // namespace mt
