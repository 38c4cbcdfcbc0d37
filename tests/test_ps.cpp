// The parameter-server architecture (dist/ps/ps_synchronizer.h, dist/ps/ps_server.h): workers and
// servers run as forked processes of one loopback Gloo world (workers 0..N-1, servers after),
// as `mintrain launch --nservers S` places them. Checked: the partition plan; BSP-PS and
// WFBP-PS with 1, 2 and 3 servers end with the weights of allreduce S-SGD and of one rank with
// N x the batch, and the servers really summed every push (counters); WFBP-PS pushes while
// backward runs; a tied parameter's two parts go apart (the decoder's pushed before the lookup's
// exists, the lookup's rows among the workers) with the same weights; a server answers partitions
// in the order their pushes arrive; a killed server or worker stops the others with an error
// naming it within the timeout; mismatched settings are refused naming both values; `launch --nservers` trains.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/ops/transformer.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/registry.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_partition.h"
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"
#include "dist/ps/ps_synchronizer.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "optim/registry.h"
#include "support/dist_training.h"
#include "support/gradcheck.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kImage = 6;
constexpr int64_t kClasses = 4;
constexpr int64_t kRowsPerWorker = 4;
constexpr int64_t kPartitionBytes = 256;  // 64 floats: the 576-float first layer is cut in 9

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- The partition plan ----

TEST(PsPartition, CutsLargeParametersAndKeepsSmallOnesWhole) {
  // Parameters of 10, 3 and 25 floats; partitions of at most 8 floats (32 bytes).
  const auto plan = dist::plan_partitions({10, 3, 25}, {2, 1, 0}, 32, 1);
  std::vector<std::tuple<size_t, int64_t, int64_t>> got;
  for (const auto& p : plan) got.emplace_back(p.param, p.offset, p.numel);
  const std::vector<std::tuple<size_t, int64_t, int64_t>> expected = {
      {2, 0, 8}, {2, 8, 8}, {2, 16, 8}, {2, 24, 1},  // push order: parameter 2 first, cut in 4
      {1, 0, 3},                                     // smaller than a partition: whole
      {0, 0, 8}, {0, 8, 2}};
  EXPECT_EQ(got, expected);
}

TEST(PsPartition, BalancesBytesOverServers) {
  // 1000 floats in partitions of 64, plus small tensors: loads within one partition of each other.
  for (int servers : {1, 2, 3, 4}) {
    const auto plan = dist::plan_partitions({1000, 7, 64, 300, 1}, {4, 3, 2, 1, 0}, 256, servers);
    const auto bytes = dist::bytes_per_server(plan, servers);
    int64_t total = 0;
    for (const auto& p : plan) {
      EXPECT_LE(p.bytes(), 256);
      EXPECT_GE(p.server, 0);
      EXPECT_LT(p.server, servers);
      total += p.bytes();
    }
    EXPECT_EQ(total, (1000 + 7 + 64 + 300 + 1) * 4);
    EXPECT_EQ(std::accumulate(bytes.begin(), bytes.end(), int64_t{0}), total);
    const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    EXPECT_LE(*hi - *lo, 256) << servers << " servers: " << dist::describe_plan(plan, servers, 256);
    if (servers > 1) {
      EXPECT_GT(*lo, 0) << servers << " servers";
    }
  }
}

// The staggered schedule's order: every worker pushes every partition once, round by round;
// within a round each server's group holds about a round's share of its bytes, and at each step
// the first S workers push to S different servers (no two into one server's link).
TEST(PsPartition, StaggeredGroupsSpreadTheWorkersOverTheServers) {
  constexpr int kServers = 4, kRounds = 3;
  const auto plan = dist::plan_partitions({1000, 7, 64, 300, 1, 2000}, {5, 4, 3, 2, 1, 0}, 128, kServers);
  const auto bytes = dist::bytes_per_server(plan, kServers);
  std::vector<std::vector<dist::PsPushGroup>> of(kServers);
  for (int w = 0; w < kServers; ++w) {
    of[static_cast<size_t>(w)] = dist::staggered_push_groups(plan, kServers, kRounds, w);
    const auto& groups = of[static_cast<size_t>(w)];
    ASSERT_EQ(groups.size(), static_cast<size_t>(kServers * kRounds)) << "worker " << w;
    std::vector<int> seen(plan.size(), 0);
    for (size_t t = 0; t < groups.size(); ++t) {
      const auto& g = groups[t];
      EXPECT_EQ(g.server, (w + static_cast<int>(t % kServers)) % kServers) << "worker " << w << " step " << t;
      int64_t group_bytes = 0;
      for (size_t k : g.partitions) {
        EXPECT_EQ(plan[k].server, g.server);
        ++seen[k];
        group_bytes += plan[k].bytes();
      }
      const int64_t share = bytes[static_cast<size_t>(g.server)] / kRounds;
      EXPECT_LE(std::abs(group_bytes - share), 128) << "worker " << w << " step " << t << ": " << group_bytes << " vs " << share;
      EXPECT_TRUE(std::is_sorted(g.partitions.begin(), g.partitions.end()));
    }
    EXPECT_EQ(seen, std::vector<int>(plan.size(), 1)) << "worker " << w;
  }
  for (size_t t = 0; t < of[0].size(); ++t) {
    std::vector<int> servers;
    for (int w = 0; w < kServers; ++w) servers.push_back(of[static_cast<size_t>(w)][t].server);
    std::sort(servers.begin(), servers.end());
    EXPECT_EQ(servers, (std::vector<int>{0, 1, 2, 3})) << "step " << t;
  }
  // A worker past S starts where worker w mod S does; one round is the server's whole share.
  EXPECT_EQ(dist::staggered_push_groups(plan, kServers, kRounds, 5)[0].server, 1);
  const auto whole = dist::staggered_push_groups(plan, kServers, 1, 2);
  ASSERT_EQ(whole.size(), static_cast<size_t>(kServers));
  EXPECT_EQ(whole[0].server, 2);
  EXPECT_THROW(dist::staggered_push_groups(plan, kServers, 0, 0), core::Error);
}

TEST(PsPartition, StaggeredGroupsFollowAGivenPushOrder) {
  // Parameter 0's partitions (plan indices 2.., pushed last in plan order) put first.
  const auto plan = dist::plan_partitions({64, 8, 8}, {2, 1, 0}, 64, 1);
  ASSERT_EQ(plan.size(), 6u);  // 8, 8, then 64 floats in four of 16
  const std::vector<size_t> order{2, 3, 4, 5, 0, 1};
  const auto groups = dist::staggered_push_groups(plan, 1, 3, 0, order);
  std::vector<size_t> pushed;
  for (const auto& g : groups) pushed.insert(pushed.end(), g.partitions.begin(), g.partitions.end());
  EXPECT_EQ(pushed, order);
  EXPECT_EQ(plan[groups[0].partitions[0]].param, 0u);
  EXPECT_THROW(dist::staggered_push_groups(plan, 1, 3, 0, {0, 1, 2}), core::Error);           // not all
  EXPECT_THROW(dist::staggered_push_groups(plan, 1, 3, 0, {0, 1, 2, 3, 4, 4}), core::Error);  // twice
}

TEST(PsPartition, BadArgumentsNameTheField) {
  try {
    dist::plan_partitions({10}, {0}, 2, 1);
    ADD_FAILURE() << "no error";
  } catch (const core::Error& e) {
    EXPECT_TRUE(has(e.what(), "dist.ps.partition_bytes must be >= 4")) << e.what();
  }
  EXPECT_THROW(dist::plan_partitions({10}, {0}, 64, 0), core::Error);
  EXPECT_THROW(dist::plan_partitions({10}, {1}, 64, 1), core::Error);
}

TEST(PsProtocol, HelloMismatchNamesBothValues) {
  EXPECT_EQ(dist::ps::hello_mismatch({1, 2, 2, 256, 1, 5}, {1, 2, 2, 256, 1, 5}), "");
  const std::string m = dist::ps::hello_mismatch({1, 2, 2, 256, 1, 5}, {1, 3, 2, 1024, 1, 5});
  EXPECT_TRUE(has(m, "workers: the workers have 2, the server 3")) << m;
  EXPECT_TRUE(has(m, "partition_bytes: the workers have 256, the server 1024")) << m;
}

// ---- Training: a tiny MLP on a fixed global batch per step ----

std::shared_ptr<layers::Module> tiny_mlp() { return mt::testing::tiny_mlp(7, kImage, kClasses); }

std::pair<Tensor, Tensor> global_batch(int step, int64_t rows) {
  return mt::testing::synthetic_batch(step, rows, kImage, kClasses);
}

std::pair<Tensor, Tensor> shard(int step, int workers, int rank) {
  auto [x, y] = global_batch(step, workers * kRowsPerWorker);
  return {x.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous(),
          y.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous()};
}


void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size());
    for (size_t i = 0; i < a[p].size(); ++i)
      ASSERT_NEAR(a[p][i], b[p][i], 2e-5 + 2e-4 * std::abs(b[p][i])) << what << ": param " << p << "[" << i << "]";
  }
}

// One rank with N x the batch.
std::vector<std::vector<float>> train_single(int steps, int workers) {
  auto model = tiny_mlp();
  auto opt = mt::testing::reference_sgd(*model);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s, workers * kRowsPerWorker);
    core::cross_entropy(model->forward(x), y).backward();
    opt->step();
    opt->zero_grad();
  }
  return mt::testing::weights_of(*model);
}

// Built through the registry, as the trainer builds it.
std::unique_ptr<dist::Synchronizer> ps_sync(const std::shared_ptr<dist::ProcessGroup>& workers,
                                            const std::shared_ptr<dist::ProcessGroup>& world, const std::string& schedule,
                                            int64_t partition_bytes = kPartitionBytes, int rounds = 4, bool split_tied = true) {
  mintrain::RunConfig run;
  run.mutable_dist()->set_algorithm("ps");
  run.mutable_dist()->mutable_ps()->set_schedule(schedule);
  run.mutable_dist()->mutable_ps()->set_partition_bytes(partition_bytes);
  run.mutable_dist()->mutable_ps()->set_rounds(rounds);
  run.mutable_dist()->mutable_ps()->set_split_tied_gradients(split_tied);
  return dist::make_synchronizer(workers, run, "same", nullptr, nullptr, world);
}

std::shared_ptr<dist::ProcessGroup> workers_of(const std::shared_ptr<dist::ProcessGroup>& world, int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return world->subgroup(ranks);
}

dist::PsServerOptions server_options(int workers, int servers, int64_t partition_bytes = kPartitionBytes) {
  dist::PsServerOptions o;
  o.workers = workers;
  o.servers = servers;
  o.partition_bytes = partition_bytes;
  return o;
}

class PsTest : public ::testing::Test {
 protected:
  void SetUp() override { core::set_num_threads(1); }
};

// The heart: N workers and S servers train K steps; every worker ends with the weights of one
// rank with N x the batch and of allreduce S-SGD (BSP) on the same workers. The servers' counters
// show that every partition of every step was pushed by every worker and summed there (allreduce
// in disguise would leave them at zero). WFBP-PS has pushed partitions while backward still ran
// (the count at the second-to-last gradient hook), BSP-PS none.
TEST_F(PsTest, BspWfbpAndStaggeredWithOneTwoThreeServersMatchSsgdAndOneRank) {
  constexpr int kSteps = 4, kWorkers = 2;
  const auto single = train_single(kSteps, kWorkers);
  for (const std::string schedule : {"bsp", "wfbp", "staggered"}) {
    for (int servers : {1, 2, 3}) {
      const std::string what = "ps/" + schedule + " with " + std::to_string(servers) + " servers";
      const auto result = mt::testing::run_ranks(kWorkers + servers, [&](mt::testing::RankContext& c) {
        core::set_num_threads(1);
        if (c.rank >= kWorkers) {
          dist::ParameterServer server(c.group, server_options(kWorkers, servers));
          const dist::PsServerStats stats = server.run();
          EXPECT_EQ(stats.iterations, kSteps) << what;
          EXPECT_GT(stats.partitions, 0) << what << ": server " << server.index() << " got no partition";
          EXPECT_EQ(stats.pushes_received, kSteps * kWorkers * stats.partitions) << what;
          EXPECT_EQ(stats.pulls_answered, kSteps * kWorkers * stats.partitions) << what;
          // Staggered pushes are paced by receipts (one per group); the other schedules ask none.
          if (schedule == "staggered") {
            EXPECT_GT(stats.receipts_sent, 0) << what;
          } else {
            EXPECT_EQ(stats.receipts_sent, 0) << what;
          }
          return;
        }
        auto workers = workers_of(c.group, kWorkers);
        {
          auto model = tiny_mlp();
          auto opt = mt::testing::reference_sgd(*model);
          auto sync = ps_sync(workers, c.group, schedule);
          auto& ps = dynamic_cast<dist::PsSynchronizer&>(*sync);
          EXPECT_EQ(ps.name(), "ps/" + schedule);
          sync->setup(*model, *opt);
          std::vector<int64_t> pushed_at_hook;
          for (const Tensor& p : opt->params()) p.register_grad_ready_hook([&](Tensor&) { pushed_at_hook.push_back(ps.pushes()); });
          for (int s = 0; s < kSteps; ++s) {
            pushed_at_hook.clear();
            const int64_t before = ps.pushes();
            sync->begin_iteration(s);
            auto [x, y] = shard(s, kWorkers, c.rank);
            core::cross_entropy(model->forward(x), y).backward();
            ASSERT_EQ(pushed_at_hook.size(), opt->params().size());
            const int64_t early = pushed_at_hook[pushed_at_hook.size() - 2] - before;
            if (schedule == "wfbp") {
              EXPECT_GT(early, 0) << what << " step " << s;
            } else if (schedule == "bsp") {
              EXPECT_EQ(early, 0) << what << " step " << s;
            }
            mt::testing::step(*sync, *opt);
            opt->zero_grad();
          }
          EXPECT_GT(ps.plan().size(), opt->params().size()) << "the first layer is cut into several partitions";
          if (schedule == "staggered") {  // 4 rounds by default; a server may have no partition in some
            EXPECT_GE(ps.push_groups().size(), static_cast<size_t>(servers)) << what;
            EXPECT_LE(ps.push_groups().size(), static_cast<size_t>(4 * servers)) << what;
          }
          EXPECT_EQ(ps.pulls(), kSteps * static_cast<int64_t>(ps.plan().size()));
          expect_close(mt::testing::weights_of(*model), single, what + ", worker " + std::to_string(c.rank) + " vs one rank");
          const auto ps_weights = mt::testing::weights_of(*model);
          sync.reset();  // tells the servers to stop
          // Allreduce S-SGD on the same workers, from the same start.
          auto ref_model = tiny_mlp();
          auto ref_opt = mt::testing::reference_sgd(*ref_model);
          dist::SsgdOptions o;
          o.schedule = dist::Schedule::BSP;
          o.config_text = "same";
          dist::SsgdSynchronizer ssgd(workers, o);
          ssgd.setup(*ref_model, *ref_opt);
          for (int s = 0; s < kSteps; ++s) {
            ssgd.begin_iteration(s);
            auto [x, y] = shard(s, kWorkers, c.rank);
            core::cross_entropy(ref_model->forward(x), y).backward();
            mt::testing::step(ssgd, *ref_opt);
            ref_opt->zero_grad();
          }
          expect_close(ps_weights, mt::testing::weights_of(*ref_model), what + ", worker " + std::to_string(c.rank) + " vs S-SGD");
        }
      });
      EXPECT_TRUE(result.ok_or_report()) << what;
    }
  }
}

// Three workers (sums of three, not two) and a partition larger than the biggest parameter.
TEST_F(PsTest, ThreeWorkersAndWholeParametersMatchOneRank) {
  constexpr int kSteps = 3, kWorkers = 3, kServers = 2;
  const auto single = train_single(kSteps, kWorkers);
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      dist::ParameterServer(c.group, server_options(kWorkers, kServers, 1 << 20)).run();
      return;
    }
    auto model = tiny_mlp();
    auto opt = mt::testing::reference_sgd(*model);
    auto sync = ps_sync(workers_of(c.group, kWorkers), c.group, "wfbp", 1 << 20);
    sync->setup(*model, *opt);
    EXPECT_EQ(dynamic_cast<dist::PsSynchronizer&>(*sync).plan().size(), opt->params().size());
    for (int s = 0; s < kSteps; ++s) {
      sync->begin_iteration(s);
      auto [x, y] = shard(s, kWorkers, c.rank);
      core::cross_entropy(model->forward(x), y).backward();
      mt::testing::step(*sync, *opt);
      opt->zero_grad();
    }
    expect_close(mt::testing::weights_of(*model), single, "3 workers, worker " + std::to_string(c.rank));
  });
  EXPECT_TRUE(result.ok_or_report());
}

// Staggered pushes a group from the gradient hooks as soon as its gradients are final (never
// waiting there): with 8 rounds on one server, round 0 holds partitions of the last two layers
// (the first gradients backward makes), so it leaves before the first layer's gradient exists;
// the weights are still those of one rank with N x the batch.
TEST_F(PsTest, StaggeredPushesFinishedGroupsDuringBackward) {
  constexpr int kSteps = 3, kWorkers = 2;
  const auto single = train_single(kSteps, kWorkers);
  const auto result = mt::testing::run_ranks(kWorkers + 1, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank == kWorkers) {
      dist::ParameterServer(c.group, server_options(kWorkers, 1)).run();
      return;
    }
    auto model = tiny_mlp();
    auto opt = mt::testing::reference_sgd(*model);
    auto sync = ps_sync(workers_of(c.group, kWorkers), c.group, "staggered", kPartitionBytes, 8);
    auto& ps = dynamic_cast<dist::PsSynchronizer&>(*sync);
    sync->setup(*model, *opt);
    ASSERT_GE(ps.push_groups().size(), 2u);
    const std::vector<size_t> first = ps.push_groups()[0].partitions;
    // The first layer's weight is the parameter backward finishes last.
    for (size_t k : first) EXPECT_NE(ps.plan()[k].param, 0u) << "round 0 should hold later layers only";
    for (int s = 0; s < kSteps; ++s) {
      const int64_t before = ps.pushes_during_backward();
      sync->begin_iteration(s);
      auto [x, y] = shard(s, kWorkers, c.rank);
      core::cross_entropy(model->forward(x), y).backward();
      EXPECT_GE(ps.pushes_during_backward() - before, static_cast<int64_t>(first.size())) << "step " << s;
      EXPECT_LT(ps.pushes_during_backward() - before, static_cast<int64_t>(ps.plan().size())) << "step " << s;
      mt::testing::step(*sync, *opt);
      opt->zero_grad();
    }
    expect_close(mt::testing::weights_of(*model), single, "staggered, worker " + std::to_string(c.rank));
  });
  EXPECT_TRUE(result.ok_or_report());
}

// ---- A tied parameter's gradient in two parts ----

constexpr int64_t kVocab = 24, kDim = 6;

// BERT's tie in miniature: one table is the lookup's and the decoder's weight.
// With `unused`, a parameter forward never reads (its gradient is zero, pushed after backward).
class TiedLookup final : public layers::Module {
 public:
  explicit TiedLookup(bool unused = false) {
    table_ = register_parameter("table", mt::testing::random_tensor({kVocab, kDim}, 21));
    hidden_ = register_parameter("hidden", mt::testing::random_tensor({kDim, kDim}, 22));
    bias_ = register_parameter("decoder_bias", mt::testing::random_tensor({kVocab}, 23, -0.1f, 0.1f));
    if (unused) register_parameter("unused", mt::testing::random_tensor({8}, 24));
  }
  Tensor forward(const Tensor& ids) override {
    const Tensor h = core::tanh(core::linear(core::embedding(table_, ids), hidden_));
    return core::linear(h, table_, bias_);
  }
  std::string type_name() const override { return "TiedLookup"; }

 private:
  Tensor table_, hidden_, bias_;
};

// Ids repeat within a batch (5 of 24 and 8 of 24 are 1/3 apart), so a row sums two uses.
std::pair<Tensor, Tensor> tied_batch(int step, int workers, int rank) {
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < workers * kRowsPerWorker; ++i) {
    ids.push_back((i * 6 + step * 5) % kVocab);
    labels.push_back((i * 7 + step) % kVocab);
  }
  Tensor x = Tensor::from_vector(ids, {workers * kRowsPerWorker}), y = Tensor::from_vector(labels, {workers * kRowsPerWorker});
  if (rank < 0) return {x, y};
  return {x.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous(),
          y.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous()};
}

// Distinct ids below `below`.
int64_t distinct(const Tensor& ids, int64_t below = kVocab) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (ids.data<int64_t>()[i] < below) v.push_back(ids.data<int64_t>()[i]);
  std::sort(v.begin(), v.end());
  return std::unique(v.begin(), v.end()) - v.begin();
}

std::vector<std::vector<float>> train_tied_single(int steps, int workers, bool unused = false) {
  TiedLookup model(unused);
  auto opt = mt::testing::reference_sgd(model);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = tied_batch(s, workers, -1);
    core::cross_entropy(model.forward(x), y).backward();
    for (Tensor p : opt->params())  // as the parameter server: a zero gradient, decayed
      if (!p.grad().defined()) p.set_grad(Tensor::zeros_like(p));
    opt->step();
    opt->zero_grad();
  }
  return mt::testing::weights_of(model);
}

// WFBP and Staggered with the split: from the second iteration the table's decoder part is
// pushed the moment the decoder's backward made it (before the lookup's part exists: a plain
// PS pushes nothing by then, as the first iteration and the split switched off show), its
// lookup part joins the table's partitions not pushed yet (staggered's second round) and goes
// among the workers as rows for those already pushed (WFBP: all, as many rows as the shard's
// distinct ids), and the weights are one rank's with N x the batch.
TEST_F(PsTest, TiedParameterIsExchangedInTwoPartsAndMatchesOneRank) {
  constexpr int kSteps = 4, kWorkers = 2;
  const auto single = train_tied_single(kSteps, kWorkers);
  for (const std::string schedule : {"wfbp", "staggered"}) {
    for (int servers : {1, 2}) {
      for (bool split : {true, false}) {
        const std::string what = "ps/" + schedule + ", " + std::to_string(servers) + " servers, split " + (split ? "on" : "off");
        const auto result = mt::testing::run_ranks(kWorkers + servers, [&](mt::testing::RankContext& c) {
          core::set_num_threads(1);
          if (c.rank >= kWorkers) {
            dist::ParameterServer(c.group, server_options(kWorkers, servers)).run();
            return;
          }
          TiedLookup model;
          auto opt = mt::testing::reference_sgd(model);
          auto sync = ps_sync(workers_of(c.group, kWorkers), c.group, schedule, kPartitionBytes, 2, split);
          auto& ps = dynamic_cast<dist::PsSynchronizer&>(*sync);
          sync->setup(model, *opt);
          int64_t before = 0, early = -1, rows = 0;
          opt->params()[0].register_grad_contribution_hook([&](Tensor&, const Tensor&, int remaining) {
            if (remaining == 1) early = ps.pushes() - before;  // the decoder's part, the lookup's to come
          });
          for (int s = 0; s < kSteps; ++s) {
            before = ps.pushes();
            early = -1;
            sync->begin_iteration(s);
            auto [x, y] = tied_batch(s, kWorkers, c.rank);
            core::cross_entropy(model.forward(x), y).backward();
            ASSERT_GE(early, 0) << what << " step " << s << ": the table's decoder part was not seen first";
            if (split && s > 0) {
              EXPECT_GT(early, 0) << what << " step " << s;
              rows += distinct(x);
            } else {
              EXPECT_EQ(early, 0) << what << " step " << s;
            }
            mt::testing::step(*sync, *opt);
            opt->zero_grad();
            if (s == 0) {
              EXPECT_EQ(ps.split_parameters(), (std::vector<bool>{split, false, false})) << what;
              if (split && schedule == "staggered") {
                EXPECT_EQ(ps.plan()[ps.push_groups()[0].partitions[0]].param, 0u) << what << ": the table goes first";
              }
            }
          }
          // WFBP pushed the whole table at the decoder's part, so every lookup row went as a row.
          if (schedule == "wfbp") {
            EXPECT_EQ(ps.rows_exchanged(), rows) << what;
            EXPECT_EQ(ps.last_parts_in_pushes(), 0) << what;
          } else {
            EXPECT_LE(ps.rows_exchanged(), rows) << what;
          }
          expect_close(mt::testing::weights_of(model), single, what + ", worker " + std::to_string(c.rank));
        });
        EXPECT_TRUE(result.ok_or_report()) << what;
      }
    }
  }
}

// Staggered, one server, two rounds: round 1 holds the table's last partition (elements
// 128..143: rows 21 to 23, row 21 straddling it) and a parameter backward never finishes, so it
// leaves only in step(). The lookup's part of that partition rides with it; only ids below 22
// (rows in partitions already pushed) travel as rows, and the weights are one rank's.
TEST_F(PsTest, TiedLookupPartRidesWithPartitionsNotPushedYet) {
  constexpr int kSteps = 4, kWorkers = 2;
  const auto single = train_tied_single(kSteps, kWorkers, /*unused=*/true);
  const auto result = mt::testing::run_ranks(kWorkers + 1, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank == kWorkers) {
      dist::ParameterServer(c.group, server_options(kWorkers, 1)).run();
      return;
    }
    TiedLookup model(/*unused=*/true);
    auto opt = mt::testing::reference_sgd(model);
    auto sync = ps_sync(workers_of(c.group, kWorkers), c.group, "staggered", kPartitionBytes, 2);
    auto& ps = dynamic_cast<dist::PsSynchronizer&>(*sync);
    sync->setup(model, *opt);
    int64_t rows = 0;
    for (int s = 0; s < kSteps; ++s) {
      sync->begin_iteration(s);
      auto [x, y] = tied_batch(s, kWorkers, c.rank);
      core::cross_entropy(model.forward(x), y).backward();
      if (s > 0) rows += distinct(x, 22);
      mt::testing::step(*sync, *opt);
      opt->zero_grad();
    }
    ASSERT_EQ(ps.plan().size(), 6u);  // the table in 3 (64, 64, 16 floats), hidden, bias, unused
    ASSERT_EQ(ps.push_groups().size(), 2u);
    const dist::PsPartition& first = ps.plan()[ps.push_groups()[1].partitions.front()];
    EXPECT_TRUE(first.param == 0 && first.offset == 128) << "round 1 starts with the table's last partition";
    EXPECT_EQ(ps.last_parts_in_pushes(), kSteps - 1);
    EXPECT_EQ(ps.rows_exchanged(), rows);
    expect_close(mt::testing::weights_of(model), single, "worker " + std::to_string(c.rank));
  });
  EXPECT_TRUE(result.ok_or_report());
}

// ---- The server's serving order ----

// The server serves a partition as soon as its N pushes are in, whatever its table's order: both
// workers push partition 2 first and wait for its sum before pushing 1, then 0. A server that
// answered in table order (0, 1, 2) would wait for pushes that never come, and the workers'
// wait for the sum of 2 would time out. The sums are taken in worker order (exact values), and
// a worker that asks for receipts gets one per push as the server takes it.
TEST_F(PsTest, ServerAnswersInTheOrderPushesArrive) {
  constexpr int kWorkers = 2;
  constexpr int64_t kNumel = 4, kBytes = 64;
  mt::testing::MultiprocessOptions options;
  options.group.timeout = std::chrono::seconds(5);
  options.timeout = std::chrono::seconds(40);
  const auto result = mt::testing::run_ranks(kWorkers + 1, [&](mt::testing::RankContext& c) {
    if (c.rank == kWorkers) {
      const dist::PsServerStats stats = dist::ParameterServer(c.group, server_options(kWorkers, 1, kBytes)).run();
      EXPECT_EQ(stats.last_answer_order, (std::vector<int64_t>{2, 1, 0}));
      EXPECT_EQ(stats.receipts_sent, 3) << "worker 1 asked for receipts, worker 0 did not";
      EXPECT_EQ(stats.pushes_received, 6);
      return;
    }
    auto workers = workers_of(c.group, kWorkers);
    const std::vector<dist::PsPartition> plan(3, dist::PsPartition{0, 0, kNumel, 0});  // ids 0, 1, 2 on server 0
    dist::greet_parameter_servers(*workers, *c.group, plan, kBytes);
    auto int64s = [](std::vector<int64_t> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); };
    std::vector<std::shared_ptr<dist::Work>> sent;
    if (c.rank == 0) sent.push_back(c.group->send(int64s({dist::ps::kStep, 0}), kWorkers, dist::ps::kCommandTag));
    const bool receipts = c.rank == 1;
    for (int64_t k : {2, 1, 0}) {
      // Worker w pushes (w + 1) * 10^k + 0.5 * i: the sum is exact in float.
      std::vector<float> mine(kNumel);
      for (int64_t i = 0; i < kNumel; ++i) mine[i] = static_cast<float>((c.rank + 1) * std::pow(10, k) + 0.5 * i);
      Tensor push = Tensor::from_vector(mine, {kNumel}), sum = Tensor::zeros({kNumel});
      Tensor note = int64s({c.rank, k, receipts ? 1 : 0}), receipt = Tensor::zeros({1}, core::DType::Int64);
      auto pull = c.group->recv(sum, kWorkers, dist::ps::pull_tag(k));
      auto got_receipt = receipts ? c.group->recv(receipt, kWorkers, dist::ps::receipt_tag(k)) : nullptr;
      sent.push_back(c.group->send(push, kWorkers, dist::ps::push_tag(k)));
      sent.push_back(c.group->send(note, kWorkers, dist::ps::kNoteTag));
      for (auto& w : sent) w->wait();
      sent.clear();
      if (got_receipt) {
        got_receipt->wait();
        EXPECT_EQ(receipt.data<int64_t>()[0], k);
      }
      pull->wait();
      for (int64_t i = 0; i < kNumel; ++i)
        EXPECT_EQ(sum.data<float>()[i], static_cast<float>(3 * std::pow(10, k) + 1.0 * i)) << "partition " << k;
    }
    if (c.rank == 0) c.group->send(int64s({dist::ps::kStop, 1}), kWorkers, dist::ps::kCommandTag)->wait();
  }, options);
  EXPECT_TRUE(result.ok_or_report());
}

// ---- Faults: every wait has the group's timeout, and the error names who is gone ----

using mt::testing::fault_options;

std::string train_until_error(const std::shared_ptr<dist::ProcessGroup>& world, int workers, int rank) {
  return mt::testing::train_until_error([&] { return ps_sync(workers_of(world, workers), world, "wfbp"); }, workers,
                                        rank, kRowsPerWorker, kImage, kClasses);
}

using mt::testing::die_after;

TEST_F(PsTest, KilledServerStopsEveryWorkerNamingIt) {
  constexpr int kWorkers = 2, kServers = 2, kTimeout = 3;
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      if (c.rank == kWorkers + 1) die_after(std::chrono::milliseconds(700));  // server 1, mid-run
      try {
        dist::ParameterServer(c.group, server_options(kWorkers, kServers)).run();
      } catch (const std::exception&) {
        // Server 0 stops when the workers go; the test is about the workers.
      }
      return;
    }
    const auto start = Clock::now();
    const std::string error = train_until_error(c.group, kWorkers, c.rank);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(has(error, "parameter server 1 (rank 3)")) << "worker " << c.rank << ": " << error;
    EXPECT_LT(took, 0.7 + kTimeout + 3.0) << "worker " << c.rank << " took " << took << " s: " << error;
  }, fault_options(kTimeout));
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_EQ(result.ranks[3].signal, SIGKILL) << result.report();
  for (int r = 0; r < kWorkers; ++r) EXPECT_TRUE(result.ranks[r].ok()) << result.report();
}

// Worker 1 is killed mid-run. A server still waiting for its pushes names it; a server that had
// finished the iteration learns of the failure only when worker 0, whose next command it awaits,
// stops in turn, and names worker 0. So every server stops in time naming a worker, and at
// least one names worker 1 (a server that never noticed, or noticed nothing, fails the test).
TEST_F(PsTest, KilledWorkerStopsEveryServerNamingIt) {
  constexpr int kWorkers = 2, kServers = 2, kTimeout = 3;
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      const auto start = Clock::now();
      std::string error;
      try {
        dist::ParameterServer(c.group, server_options(kWorkers, kServers)).run();
      } catch (const std::exception& e) {
        error = e.what();
      }
      const double took = std::chrono::duration<double>(Clock::now() - start).count();
      const bool named_killed = has(error, "worker 1 (rank 1) is gone or silent");
      EXPECT_TRUE(named_killed || has(error, "worker 0 (rank 0) is gone or silent")) << "rank " << c.rank << ": " << error;
      EXPECT_LT(took, 0.7 + kTimeout + 3.0) << "rank " << c.rank << " took " << took << " s: " << error;
      c.store->set("test/named_killed/" + std::to_string(c.rank), {static_cast<uint8_t>(named_killed ? '1' : '0')});
      return;
    }
    if (c.rank == 1) die_after(std::chrono::milliseconds(700));
    const std::string error = train_until_error(c.group, kWorkers, c.rank);
    EXPECT_FALSE(error.empty());  // worker 0: the servers (or worker 1) went away
    // Worker 0 hosts the store: it stays until both servers have said whom they named.
    int named_killed = 0;
    for (int s = kWorkers; s < kWorkers + kServers; ++s) named_killed += c.store->get("test/named_killed/" + std::to_string(s))[0] == '1';
    EXPECT_GE(named_killed, 1) << "no server named the killed worker 1";
  }, fault_options(kTimeout));
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL) << result.report();
  for (int r : {0, 2, 3}) EXPECT_TRUE(result.ranks[r].ok()) << result.report();
}

// A server started with another partition size, and one that counts the world differently
// (another MINTRAIN_NUM_SERVERS: 3 workers and 1 server in the same world of 4), are refused at
// set-up; both sides name both values, and the server that agreed is told to stop.
TEST_F(PsTest, MismatchedServerIsRefusedNamingBothValues) {
  constexpr int kWorkers = 2, kServers = 2;
  for (const bool wrong_world : {false, true}) {
    const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      const std::string expected = wrong_world ? "workers: the workers have 2, the server 3"
                                               : "partition_bytes: the workers have 256, the server 1024";
      if (c.rank == kWorkers + 1) {  // the odd one
        const auto o = wrong_world ? server_options(3, 1) : server_options(kWorkers, kServers, 1024);
        try {
          dist::ParameterServer(c.group, o).run();
          ADD_FAILURE() << "the server accepted";
        } catch (const core::Error& e) {
          EXPECT_TRUE(has(e.what(), expected)) << e.what();
          EXPECT_TRUE(has(e.what(), "refuses the job")) << e.what();
        }
        return;
      }
      if (c.rank == kWorkers) {  // agrees, and is told to stop
        EXPECT_EQ(dist::ParameterServer(c.group, server_options(kWorkers, kServers)).run().iterations, 0);
        return;
      }
      auto model = tiny_mlp();
      auto opt = mt::testing::reference_sgd(*model);
      auto sync = ps_sync(workers_of(c.group, kWorkers), c.group, "bsp");
      try {
        sync->setup(*model, *opt);
        ADD_FAILURE() << "worker " << c.rank << " accepted";
      } catch (const core::Error& e) {
        if (c.rank == 0) {
          EXPECT_TRUE(has(e.what(), "parameter server 1 (rank 3) refuses the job: " + expected)) << e.what();
        } else {
          EXPECT_TRUE(has(e.what(), "the parameter servers refused the job")) << e.what();
        }
      }
    });
    EXPECT_TRUE(result.ok_or_report()) << (wrong_world ? "wrong world" : "wrong partition size");
  }
}

TEST(PsConfig, NeedsServersAndKnowsItsSchedules) {
  mintrain::DistConfig d;
  d.set_algorithm("ps");
  d.mutable_ps()->set_schedule("fusion");
  try {
    dist::validate_dist_config(d);
    ADD_FAILURE() << "no error";
  } catch (const core::Error& e) {
    EXPECT_TRUE(has(e.what(), "unknown dist.ps.schedule \"fusion\"; valid names are: bsp, wfbp, staggered")) << e.what();
  }
  const auto result = mt::testing::run_ranks(2, [](mt::testing::RankContext& c) {
    mintrain::RunConfig run;
    run.mutable_dist()->set_algorithm("ps");
    try {
      dist::make_synchronizer(c.group, run, "same");
      ADD_FAILURE() << "made without servers";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "needs parameter servers: start them with `mintrain launch --nservers S`")) << e.what();
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// ---- The command line: `mintrain launch --nservers` ----

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct CommandResult {
  int status = -1;
  std::string out, err;
};

// Runs a shell script in a fresh folder, capturing its output.
CommandResult run_shell(const std::string& script) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_ps_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = "cd " + dir.string() + " && { " + script + "; } >out 2>err </dev/null";
  const int raw = std::system(cmd.c_str());
  CommandResult r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

const std::string kMintrain = "OMP_NUM_THREADS=1 timeout 120 " + std::string(MT_BINARY_DIR) + "/apps/mintrain ";

CommandResult run_mintrain(const std::string& args) { return run_shell(kMintrain + args); }

TEST(PsLaunch, LaunchStartsServersBesideTheWorkersAndTrains) {
  const std::string config = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  // The timeline shows each partition's push-to-pull span, server by server.
  const CommandResult r = run_mintrain("launch --nproc-per-node 2 --nservers 2 -- train " + config +
                                       " --output run --set epochs=1 --set dist.algorithm=ps --set dist.ps.schedule=wfbp"
                                       " --set dist.ps.partition_bytes=4096 --set dist.timeout_seconds=20"
                                       " --set dist.timeline_file=timeline_{rank}.json"
                                       " && grep -o '\"ps p[0-9]* s[0-9]*\"' run/timeline_1.json | sort -u");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "\"ps p0 s")) << r.out;
  EXPECT_TRUE(has(r.out, " s0\"") && has(r.out, " s1\"")) << "spans on both servers: " << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0] distributed: ps/wfbp")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0] parameter server: 2 servers")) << r.out;
  EXPECT_TRUE(has(r.out, "[server 0] parameter server 0 (rank 2): serving")) << r.out;
  EXPECT_TRUE(has(r.out, "[server 1] parameter server 1 (rank 3): done after 16 iterations")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0] done: 16 iterations")) << r.out;
}

// Ctrl-C to launch reaches workers and servers alike; the workers finish the iteration and
// checkpoint (their last exchange needs the servers, which ignore the signal), then worker 0
// tells the servers to stop.
TEST(PsLaunch, InterruptCheckpointsAndStopsTheServers) {
  const std::string config = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  const CommandResult r = run_shell(
      kMintrain + "launch --nproc-per-node 2 --nservers 1 -- train " + config + " --output run --set epochs=1000"
      " --set dist.algorithm=ps --set dist.timeout_seconds=20 & pid=$!; sleep 3; kill -INT $pid; wait $pid");
  EXPECT_EQ(r.status, 130) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "[rank 0] mintrain: interrupted; checkpoint")) << r.err;
  EXPECT_TRUE(has(r.out, "[server 0] parameter server 0 (rank 2): done after")) << r.out << r.err;
}

TEST(PsLaunch, ServersWithAnAlgorithmThatUsesNoneAreRefused) {
  const std::string config = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  const CommandResult r = run_mintrain("launch --nproc-per-node 1 --nservers 1 --grace 1 -- train " + config +
                             " --output run --set epochs=1 --set dist.timeout_seconds=10");
  EXPECT_NE(r.status, 0) << r.out << r.err;
  // Worker or server, whichever speaks first (the launcher then stops the other).
  EXPECT_TRUE(has(r.err, "but dist.algorithm \"ssgd\" uses none; set dist.algorithm \"auto\" or \"ps\" (or \"bytescheduler\" or \"dlcp\" with architecture \"ps\") or start no servers"))
      << r.err;
}

}  // namespace
