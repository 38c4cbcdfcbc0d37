// Hierarchical allreduce (dist/hierarchical_group.h) on Gloo, ranks as forked processes on
// loopback in two racks: it equals the flat allreduce; only the representatives join the
// cross-rack communicator (counted by a process group that wraps the world and every subgroup
// made from it); S-SGD with dist.ssgd.allreduce "hierarchical" on N ranks equals one rank with
// N times the batch, and sends no gradient over the flat world; the trainer learns with it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/hierarchical_group.h"
#include "dist/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

using mt::testing::CountingGroup;
using mt::testing::Tally;
using mt::testing::world_members;

std::string join(const std::vector<int>& ranks) { return mt::testing::join_ranks(ranks); }

// Rank r's input for allreduce k: values that differ per rank, per element and per call.
Tensor input(int rank, int k, int64_t n) {
  core::Generator gen(100 * rank + k + 1);
  Tensor t = Tensor::empty({n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = gen.uniform() * 2.0f - 1.0f;
  return t;
}

}  // namespace

// 4 and 8 ranks in two racks, consecutive ({0..n/2-1}, {n/2..n-1}) and interleaved (even and odd
// ranks, so the representatives are 0 and 1): three allreduces in flight at once, sum and max,
// equal to the flat ring's within float tolerance (the summation order differs). Each rank
// issues per allreduce one in-rack allreduce and one in-rack broadcast; the cross-rack
// allreduce is issued by the two representatives only, and nothing goes over the world.
TEST(HierarchicalAllreduce, EqualsTheFlatAllreduceAndOnlyRepresentativesCrossRacks) {
  constexpr int kCalls = 3;
  constexpr int64_t kValues = 1000;
  for (int n : {4, 8}) {
    for (bool interleaved : {false, true}) {
      const auto result = mt::testing::run_ranks(n, [&](mt::testing::RankContext& c) {
        std::vector<int> rack_of;
        for (int r = 0; r < n; ++r) rack_of.push_back(interleaved ? r % 2 : r / (n / 2));
        auto tally = std::make_shared<Tally>();
        auto world = std::make_shared<CountingGroup>(c.group, world_members(n), tally);
        dist::HierarchicalGroup hier(world, rack_of, std::chrono::seconds(10));

        std::vector<Tensor> flat, mine;
        for (int k = 0; k < kCalls; ++k) {
          flat.push_back(input(c.rank, k, kValues));
          mine.push_back(input(c.rank, k, kValues));
        }
        std::vector<std::shared_ptr<dist::Work>> works;
        for (int k = 0; k < kCalls; ++k)
          works.push_back(hier.allreduce(mine[k], k == 2 ? dist::ReduceOp::Max : dist::ReduceOp::Sum));
        for (auto& w : works) w->wait();
        const int world_before = tally->of("allreduce {" + world_members(n) + "}");
        EXPECT_EQ(world_before, 0) << "the hierarchical allreduce used the flat world";
        for (int k = 0; k < kCalls; ++k)
          c.group->allreduce(flat[k], k == 2 ? dist::ReduceOp::Max : dist::ReduceOp::Sum)->wait();
        for (int k = 0; k < kCalls; ++k) {
          const auto a = mine[k].to_vector(), b = flat[k].to_vector();
          for (int64_t i = 0; i < kValues; ++i)
            ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::abs(b[i])) << "call " << k << " value " << i;
        }

        std::vector<int> rack_members;
        for (int r = 0; r < n; ++r)
          if (rack_of[r] == rack_of[c.rank]) rack_members.push_back(r);
        const std::string rack = join(rack_members);
        const std::string reps = interleaved ? "0,1" : "0," + std::to_string(n / 2);
        EXPECT_EQ(hier.representatives(), (interleaved ? std::vector<int>{0, 1} : std::vector<int>{0, n / 2}));
        EXPECT_EQ(tally->of("allreduce {" + rack + "}"), kCalls);
        EXPECT_EQ(tally->of("broadcast {" + rack + "}"), kCalls);
        EXPECT_EQ(tally->of("allreduce {" + reps + "}"), hier.representative() ? kCalls : 0);
        EXPECT_EQ(hier.representative(), c.rank == 0 || c.rank == (interleaved ? 1 : n / 2));
      });
      EXPECT_TRUE(result.ok_or_report()) << n << " ranks, " << (interleaved ? "interleaved" : "consecutive");
    }
  }
}

TEST(HierarchicalAllreduce, RacksThatDoNotFitTheWorldAreClearErrors) {
  const auto result = mt::testing::run_ranks(2, [](mt::testing::RankContext& c) {
    try {
      dist::HierarchicalGroup hier(c.group, {0, 1, 1}, std::chrono::seconds(10));
      ADD_FAILURE() << "no error for 3 rack ids on 2 ranks";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("3 rack ids for 2 ranks"), std::string::npos) << e.what();
    }
    try {
      dist::racks_from_config({0, 1, 1}, 0, 2, "dist.ssgd");
      ADD_FAILURE() << "no error for dist.ssgd.rack of 3 entries on 2 ranks";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dist.ssgd.rack has 3 entries"), std::string::npos) << e.what();
    }
    mintrain::RunConfig run;
    run.mutable_dist()->set_algorithm("ssgd");
    run.mutable_dist()->mutable_ssgd()->set_allreduce("hierarchical");
    try {
      dist::make_synchronizer(c.group, run);
      ADD_FAILURE() << "no error for hierarchical without racks";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dist.ssgd.ranks_per_rack"), std::string::npos) << e.what();
    }
    run.mutable_dist()->mutable_ssgd()->set_allreduce("tree");
    try {
      dist::make_synchronizer(c.group, run);
      ADD_FAILURE() << "no error for dist.ssgd.allreduce \"tree\"";
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dist.ssgd.allreduce"), std::string::npos) << e.what();
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

namespace {

constexpr int64_t kImage = 6;
constexpr int64_t kClasses = 4;

std::pair<Tensor, Tensor> global_batch(int step, int64_t rows) {
  return mt::testing::synthetic_batch(step, rows, kImage, kClasses);
}

std::unique_ptr<optim::Optimizer> sgd(const layers::Module& m) {
  optim::OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return optim::build_optimizer("sgd", m.parameters(), o);
}

}  // namespace

// S-SGD from the factory with dist.ssgd.allreduce "hierarchical", 4 ranks in two racks of 2
// (ranks_per_rack) and 8 ranks in two racks of 4 (rack ids): after 3 steps every rank holds the
// weights of one process trained on the whole batch, for BSP and FUSION (several messages in
// flight). No gradient allreduce goes over the flat world, and only the representatives issue
// the cross-rack ones: swapping hierarchical for flat fails here.
TEST(HierarchicalAllreduce, SsgdOnNRanksMatchesOneRankWithNTimesTheBatch) {
  constexpr int kSteps = 3;
  constexpr int64_t kRows = 16;
  for (int n : {4, 8}) {
    const auto result = mt::testing::run_ranks(n, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      auto reference_model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto reference_opt = sgd(*reference_model);
      for (int s = 0; s < kSteps; ++s) {
        auto [x, y] = global_batch(s, kRows);
        core::cross_entropy(reference_model->forward(x), y).backward();
        reference_opt->step();
        reference_opt->zero_grad();
      }
      const auto reference = mt::testing::weights_of(*reference_model);

      for (const std::string schedule : {"bsp", "fusion"}) {
        auto tally = std::make_shared<Tally>();
        auto world = std::make_shared<CountingGroup>(c.group, world_members(n), tally);
        mintrain::RunConfig run;
        mintrain::DistConfig& d = *run.mutable_dist();
        d.set_algorithm("ssgd");
        d.mutable_ssgd()->set_schedule(schedule);
        d.mutable_ssgd()->set_bucket_cap_mb(600.0 / (1 << 20));  // several buckets for this model
        d.mutable_ssgd()->set_first_bucket_cap_mb(100.0 / (1 << 20));
        d.mutable_ssgd()->set_allreduce("hierarchical");
        if (n == 4) {
          d.mutable_ssgd()->set_ranks_per_rack(2);
        } else {
          for (int r = 0; r < n; ++r) d.mutable_ssgd()->add_rack(r < 4 ? 0 : 1);
        }
        auto sync = dist::make_synchronizer(world, run);
        auto model = mt::testing::tiny_mlp(7 + c.rank, kImage, kClasses);  // setup broadcasts rank 0's
        auto opt = sgd(*model);
        sync->setup(*model, *opt);
        const int64_t per_rank = kRows / n;
        for (int s = 0; s < kSteps; ++s) {
          sync->begin_iteration(s);
          auto batch = global_batch(s, kRows);
          Tensor x = batch.first.narrow(0, c.rank * per_rank, per_rank).contiguous();
          Tensor y = batch.second.narrow(0, c.rank * per_rank, per_rank).contiguous();
          core::cross_entropy(model->forward(x), y).backward();
          sync->step(*opt);
          opt->zero_grad();
        }
        const auto got = mt::testing::weights_of(*model);
        ASSERT_EQ(got.size(), reference.size());
        for (size_t p = 0; p < got.size(); ++p)
          for (size_t i = 0; i < got[p].size(); ++i)
            ASSERT_NEAR(got[p][i], reference[p][i], 2e-5 + 2e-4 * std::abs(reference[p][i]))
                << schedule << ", " << n << " ranks: param " << p << "[" << i << "]";

        const std::string reps = "0," + std::to_string(n / 2);
        EXPECT_EQ(tally->of("allreduce {" + world_members(n) + "}"), 0) << schedule << ": gradients went flat";
        const int crossed = tally->of("allreduce {" + reps + "}");
        if (c.rank == 0 || c.rank == n / 2) {
          EXPECT_GE(crossed, kSteps) << schedule << ": the representative sent no gradient across racks";
        } else {
          EXPECT_EQ(crossed, 0) << schedule << ": rank " << c.rank << " is no representative";
        }
      }
    });
    EXPECT_TRUE(result.ok_or_report()) << n << " ranks";
  }
}

// The whole path from the config text: the trainer on 4 ranks with dist.ssgd.allreduce
// "hierarchical" in racks of 2 learns, and rank 0's log names the racks it used.
TEST(HierarchicalAllreduce, TrainerLearnsOnFourRanksInTwoRacks) {
  const fs::path dir = fs::temp_directory_path() / ("mt_hier_trainer_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  const auto result = mt::testing::run_ranks(4, [&](mt::testing::RankContext& c) {
    std::ostringstream log;
    const double acc = mt::testing::train_synthetic_mlp(
        c.group, c.rank, dir.string(),
        {"dist.algorithm=ssgd", "dist.ssgd.allreduce=HIERARCHICAL", "dist.ssgd.ranks_per_rack=2"}, log);
    EXPECT_GT(acc, 60.0) << log.str();  // chance is 1/classes
    if (c.rank == 0) {
      EXPECT_NE(log.str().find("S-SGD: hierarchical (rack {0,1}, representatives {0,2})"), std::string::npos)
          << log.str();
    }
  }, mo);
  EXPECT_TRUE(result.ok_or_report());
  fs::remove_all(dir);
}
