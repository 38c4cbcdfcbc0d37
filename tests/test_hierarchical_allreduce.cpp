// Hierarchical allreduce (dist/comm/hierarchical_group.h) on Gloo, ranks as forked processes on
// loopback in two racks: it equals the flat allreduce; sums cross the racks in shards, each
// rank with those of its index in the other racks, and anything else through the representatives
// only (counted by a process group that wraps the world and every subgroup made from it); S-SGD with dist.ssgd.allreduce "hierarchical" on N ranks equals one rank with
// N times the batch, and sends no gradient over the flat world; the trainer learns with it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/comm/hierarchical_group.h"
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
// "first,...,last-1"
std::string join_range(int first, int last) {
  std::vector<int> ranks;
  for (int r = first; r < last; ++r) ranks.push_back(r);
  return join(ranks);
}

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
// ranks, so the representatives are 0 and 1): four allreduces in flight at once, three sums (one
// of a size the rack does not divide, so padded, and one large enough to go in pieces, the last
// padded) and a max, equal to the flat ring's within float tolerance (the summation order
// differs). Per sum and piece each rank issues a reduce-scatter and an allgather in its rack and
// an allreduce with the ranks of its index in the other rack; the max
// goes through the representatives (in-rack allreduce, their allreduce, in-rack broadcast).
// Nothing goes over the world.
TEST(HierarchicalAllreduce, EqualsTheFlatAllreduceAndSumsCrossInShards) {
  const std::vector<int64_t> sizes = {1000, 1003, 1000, 300001};
  const std::vector<dist::ReduceOp> ops = {dist::ReduceOp::Sum, dist::ReduceOp::Sum, dist::ReduceOp::Max,
                                           dist::ReduceOp::Sum};
  const int pieces = dist::HierarchicalGroup::pieces_of(300001 * 4);
  ASSERT_EQ(pieces, 4);  // 1.2 MB in pieces of at least 256 KiB
  for (int n : {4, 8}) {
    for (bool interleaved : {false, true}) {
      const auto result = mt::testing::run_ranks(n, [&](mt::testing::RankContext& c) {
        std::vector<int> rack_of;
        for (int r = 0; r < n; ++r) rack_of.push_back(interleaved ? r % 2 : r / (n / 2));
        auto tally = std::make_shared<Tally>();
        auto world = std::make_shared<CountingGroup>(c.group, world_members(n), tally);
        dist::HierarchicalGroup hier(world, rack_of, std::chrono::seconds(10));
        EXPECT_TRUE(hier.sharded());

        std::vector<Tensor> flat, mine;
        for (size_t k = 0; k < sizes.size(); ++k) {
          flat.push_back(input(c.rank, static_cast<int>(k), sizes[k]));
          mine.push_back(input(c.rank, static_cast<int>(k), sizes[k]));
        }
        std::vector<std::shared_ptr<dist::Work>> works;
        for (size_t k = 0; k < sizes.size(); ++k) works.push_back(hier.allreduce(mine[k], ops[k]));
        for (auto& w : works) w->wait();
        const int world_before = tally->of("allreduce {" + world_members(n) + "}");
        EXPECT_EQ(world_before, 0) << "the hierarchical allreduce used the flat world";
        for (size_t k = 0; k < sizes.size(); ++k) c.group->allreduce(flat[k], ops[k])->wait();
        for (size_t k = 0; k < sizes.size(); ++k) {
          const auto a = mine[k].to_vector(), b = flat[k].to_vector();
          for (int64_t i = 0; i < sizes[k]; ++i)
            ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::abs(b[i])) << "call " << k << " value " << i;
        }

        std::vector<int> rack_members;
        for (int r = 0; r < n; ++r)
          if (rack_of[r] == rack_of[c.rank]) rack_members.push_back(r);
        const int index = static_cast<int>(std::find(rack_members.begin(), rack_members.end(), c.rank) -
                                           rack_members.begin());
        // The rank of the same index in the other rack.
        const int partner = interleaved ? 2 * index + 1 - c.rank % 2 : (c.rank < n / 2 ? c.rank + n / 2 : c.rank - n / 2);
        const std::string rack = join(rack_members);
        const std::string crossing = join({std::min(c.rank, partner), std::max(c.rank, partner)});
        const std::string reps = interleaved ? "0,1" : "0," + std::to_string(n / 2);
        EXPECT_EQ(hier.representatives(), (interleaved ? std::vector<int>{0, 1} : std::vector<int>{0, n / 2}));
        EXPECT_EQ(hier.representative(), c.rank == 0 || c.rank == (interleaved ? 1 : n / 2));
        EXPECT_EQ(hier.crossing(), (std::vector<int>{std::min(c.rank, partner), std::max(c.rank, partner)}));
        EXPECT_EQ(tally->of("reduce_scatter {" + rack + "}"), 2 + pieces);
        EXPECT_EQ(tally->of("allgather {" + rack + "}"), 2 + pieces);
        EXPECT_EQ(tally->of("allreduce {" + rack + "}"), 1);
        EXPECT_EQ(tally->of("broadcast {" + rack + "}"), 1);
        // A representative's shard partners are the representatives: its max crosses there too.
        EXPECT_EQ(tally->of("allreduce {" + crossing + "}"), 2 + pieces + (hier.representative() ? 1 : 0));
        if (!hier.representative()) {
          EXPECT_EQ(tally->of("allreduce {" + reps + "}"), 0);
        }
      });
      EXPECT_TRUE(result.ok_or_report()) << n << " ranks, " << (interleaved ? "interleaved" : "consecutive");
    }
  }
}

// Racks of unequal size (3 ranks: {0,1} and {2}) cannot share a tensor in equal shards: sums go
// through the representatives, and still equal the flat allreduce.
TEST(HierarchicalAllreduce, UnequalRacksSumThroughTheRepresentatives) {
  const auto result = mt::testing::run_ranks(3, [&](mt::testing::RankContext& c) {
    auto tally = std::make_shared<Tally>();
    auto world = std::make_shared<CountingGroup>(c.group, world_members(3), tally);
    dist::HierarchicalGroup hier(world, {0, 0, 1}, std::chrono::seconds(10));
    EXPECT_FALSE(hier.sharded());
    Tensor mine = input(c.rank, 0, 777), flat = input(c.rank, 0, 777);
    hier.allreduce(mine)->wait();
    c.group->allreduce(flat)->wait();
    const auto a = mine.to_vector(), b = flat.to_vector();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::abs(b[i])) << "value " << i;
    EXPECT_EQ(tally->all_of("reduce_scatter"), 0);
    EXPECT_EQ(tally->of("allreduce {0,2}"), c.rank == 1 ? 0 : 1);
    EXPECT_EQ(tally->of("allreduce {0,1}"), c.rank == 2 ? 0 : 1);
    EXPECT_EQ(tally->of("broadcast {0,1}"), c.rank == 2 ? 0 : 1);
  });
  EXPECT_TRUE(result.ok_or_report());
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

std::unique_ptr<optim::StepGuard> sgd(const layers::Module& m) {
  optim::OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return mt::testing::guarded(optim::build_optimizer("sgd", m.parameters(), o));
}

}  // namespace

// S-SGD from the factory with dist.ssgd.allreduce "hierarchical", 4 ranks in two racks of 2
// (ranks_per_rack) and 8 ranks in two racks of 4 (rack ids): after 3 steps every rank holds the
// weights of one process trained on the whole batch, for BSP and FUSION (several messages in
// flight). No gradient allreduce goes over the flat world; every rank reduce-scatters in its rack
// and crosses with the rank of its index in the other rack: swapping hierarchical for flat fails
// here.
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
          mt::testing::step(*sync, *opt);
          opt->zero_grad();
        }
        const auto got = mt::testing::weights_of(*model);
        ASSERT_EQ(got.size(), reference.size());
        for (size_t p = 0; p < got.size(); ++p)
          for (size_t i = 0; i < got[p].size(); ++i)
            ASSERT_NEAR(got[p][i], reference[p][i], 2e-5 + 2e-4 * std::abs(reference[p][i]))
                << schedule << ", " << n << " ranks: param " << p << "[" << i << "]";

        const int half = n / 2, index = c.rank % half;
        EXPECT_EQ(tally->of("allreduce {" + world_members(n) + "}"), 0) << schedule << ": gradients went flat";
        const std::string rack = c.rank < half ? join_range(0, half) : join_range(half, n);
        EXPECT_GE(tally->of("reduce_scatter {" + rack + "}"), kSteps) << schedule << ": no in-rack reduce-scatter";
        EXPECT_GE(tally->of("allreduce {" + std::to_string(index) + "," + std::to_string(index + half) + "}"), kSteps)
            << schedule << ": rank " << c.rank << " sent no shard across racks";
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
    auto tally = std::make_shared<Tally>();
    auto world = std::make_shared<CountingGroup>(c.group, world_members(4), tally);
    const double acc = mt::testing::train_synthetic_mlp(
        world, c.rank, dir.string(),
        {"dist.algorithm=ssgd", "dist.ssgd.allreduce=HIERARCHICAL", "dist.ssgd.ranks_per_rack=2"}, log);
    EXPECT_GT(acc, 60.0) << log.str();  // chance is 1/classes
    // What the flat ring would not do, in 96 steps: the gradients reduce-scattered in the rack and
    // summed across racks by the shard's holders; the world's allreduces are the metrics' only.
    const std::string rack = c.rank < 2 ? "{0,1}" : "{2,3}", across = c.rank % 2 == 0 ? "{0,2}" : "{1,3}";
    EXPECT_GE(tally->of("reduce_scatter " + rack), 96);
    EXPECT_GE(tally->of("allreduce " + across), 96);
    EXPECT_LT(tally->of("allreduce {0,1,2,3}"), 48);
    if (c.rank == 0) {
      EXPECT_NE(log.str().find("S-SGD: hierarchical (rack {0,1}, representatives {0,2}, sums in 2 shards)"), std::string::npos)
          << log.str();
    }
  }, mo);
  EXPECT_TRUE(result.ok_or_report());
  fs::remove_all(dir);
}
