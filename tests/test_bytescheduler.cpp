// ByteScheduler (dist/bytescheduler/bytescheduler_synchronizer.h, dist/bytescheduler/bytescheduler_queue.h) on both
// architectures, as forked processes of one loopback Gloo world (workers 0..N-1, parameter
// servers after them for "ps"). Checked: the priority queue and its credit alone; N workers end
// with the weights of one rank with N x the batch (all-to-all, and 1, 2 and 3 servers, whose
// counters show every partition summed there); with a credit of one partition, layer 0's
// partitions leave before the last layer's although they became ready after them, and a server
// answers in the order the pushes arrive (layer 0's before the last layer's they overtook); layer 0's
// forward of iteration t+1 runs while partitions of iteration t are still travelling; a NaN on
// one worker skips the step on all; a killed server stops the workers naming it; the trainer
// learns with it from the config alone; bad settings are refused naming the field.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/bytescheduler/bytescheduler_queue.h"
#include "dist/bytescheduler/bytescheduler_synchronizer.h"
#include "dist/bytescheduler/credit_search.h"
#include "dist/registry.h"
#include "dist/ps/ps_partition.h"
#include "dist/ps/ps_server.h"
#include "layers/models/mlp.h"
#include "optim/sgd.h"
#include "optim/step_guard.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kImage = 6;
constexpr int64_t kClasses = 4;
constexpr int64_t kRowsPerWorker = 4;
constexpr int64_t kPartitionBytes = 256;  // 64 floats: the 576-float first layer is cut in 9

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- The queue alone ----

// The credit search on known costs: each candidate runs 3 exchanges, the first interval of each
// (begun under the previous candidate) not counted, and the least mean wins. The first intervals
// here would crown 512 if they counted (256's is 5 s); the first of equal means wins.
TEST(ByteSchedulerCreditSearch, ChoosesTheCheapestCandidateOnKnownCosts) {
  const std::vector<int64_t> credits = {64, 128, 256, 512};
  const std::vector<double> cost = {0.030, 0.020, 0.012, 0.015}, first = {0.0, 0.0, 5.0, 0.0};
  dist::CreditSearch search(credits, 3);
  int64_t e = 0;
  for (size_t k = 0; k < credits.size(); ++k) {
    for (int i = 0; i < 3; ++i, ++e) {
      ASSERT_TRUE(search.searching());
      EXPECT_EQ(search.current(), credits[k]) << "exchange " << e;
      EXPECT_EQ(search.record(e, i == 0 ? first[k] : cost[k]), k + 1 == credits.size() && i == 2) << "exchange " << e;
    }
  }
  EXPECT_FALSE(search.searching());
  EXPECT_EQ(search.current(), 256);
  EXPECT_FALSE(search.record(e, 0.0));  // over: nothing changes
  EXPECT_EQ(search.current(), 256);

  dist::CreditSearch ties({64, 128}, 2);
  for (int64_t x = 0; x < 4; ++x) ties.record(x, 0.01);
  EXPECT_EQ(ties.current(), 64);
}

TEST(CreditQueue, HighestPriorityReadyItemFirst) {
  dist::CreditQueue q({4, 4, 4, 4}, 1000);
  for (size_t k : {3, 1, 2, 0}) q.mark_ready(k);
  std::vector<size_t> order;
  while (auto k = q.next()) order.push_back(*k);
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(q.all_sent());
  EXPECT_FALSE(q.all_finished());
}

TEST(CreditQueue, CreditBoundsTheBytesInFlight) {
  dist::CreditQueue q({10, 10, 10}, 20);
  for (size_t k : {0, 1, 2}) q.mark_ready(k);
  EXPECT_EQ(q.next(), std::optional<size_t>(0));
  EXPECT_EQ(q.next(), std::optional<size_t>(1));
  EXPECT_EQ(q.next(), std::nullopt) << "30 bytes would exceed the credit of 20";
  EXPECT_EQ(q.bytes_in_flight(), 20);
  q.finished(0);
  EXPECT_EQ(q.next(), std::optional<size_t>(2));
  q.finished(1);
  q.finished(2);
  EXPECT_TRUE(q.all_finished());
}

TEST(CreditQueue, LaterHigherPriorityItemOvertakesWaitingOnes) {
  // Backward makes item 4 (the last layer) ready first, then 3, and item 0 (layer 0) last; with
  // a credit of one item, 0 goes before 3 although 3 waited longer.
  dist::CreditQueue q({8, 8, 8, 8, 8}, 8);
  q.mark_ready(4);
  EXPECT_EQ(q.next(), std::optional<size_t>(4));
  q.mark_ready(3);
  q.mark_ready(2);
  EXPECT_EQ(q.next(), std::nullopt) << "the credit is taken by item 4";
  q.mark_ready(1);
  q.mark_ready(0);
  q.finished(4);
  EXPECT_EQ(q.next(), std::optional<size_t>(0));
  q.finished(0);
  EXPECT_EQ(q.next(), std::optional<size_t>(1));
}

TEST(CreditQueue, AnItemLargerThanTheCreditGoesAlone) {
  dist::CreditQueue q({100, 1}, 10);
  q.mark_ready(0);
  q.mark_ready(1);
  EXPECT_EQ(q.next(), std::optional<size_t>(0)) << "nothing in flight: the queue must not stall";
  EXPECT_EQ(q.next(), std::nullopt);
  q.finished(0);
  EXPECT_EQ(q.next(), std::optional<size_t>(1));
}

TEST(CreditQueue, ResetStartsARound) {
  dist::CreditQueue q({4, 4}, 4);
  q.mark_ready(1);
  ASSERT_EQ(q.next(), std::optional<size_t>(1));
  q.reset();
  EXPECT_EQ(q.bytes_in_flight(), 0);
  EXPECT_EQ(q.next(), std::nullopt) << "nothing is ready after a reset";
  EXPECT_FALSE(q.is_ready(1));
}

TEST(CreditQueue, BadCreditNamesTheField) {
  try {
    dist::CreditQueue q({4}, 0);
    ADD_FAILURE() << "no error";
  } catch (const core::Error& e) {
    EXPECT_TRUE(has(e.what(), "dist.bytescheduler.credit_bytes")) << e.what();
  }
  dist::CreditQueue q({4, 4}, 8);
  EXPECT_THROW(q.finished(0), core::Error) << "finishing an item that was never sent";
  EXPECT_THROW(q.mark_ready(2), core::Error);
}

// ---- Config ----

mintrain::DistConfig bs_config(const std::string& architecture, int64_t partition_bytes, int64_t credit_bytes) {
  mintrain::DistConfig d;
  d.set_algorithm("bytescheduler");
  d.mutable_bytescheduler()->set_architecture(architecture);
  d.mutable_bytescheduler()->set_partition_bytes(partition_bytes);
  d.mutable_bytescheduler()->set_credit_bytes(credit_bytes);
  return d;
}

std::string validation_error(const mintrain::DistConfig& d) {
  try {
    dist::validate_dist_config(d);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ByteSchedulerConfig, BadValuesNameTheField) {
  EXPECT_EQ(validation_error(bs_config("a2a", 4096, 0)), "");
  EXPECT_EQ(validation_error(bs_config("ps", 4096, 8192)), "");
  EXPECT_TRUE(has(validation_error(bs_config("a2a", 4, 0)), "dist.bytescheduler.partition_bytes must be 0"))
      << validation_error(bs_config("a2a", 4, 0));
  EXPECT_EQ(validation_error(bs_config("a2a", 0, 0)), "");
  // 0, the default: the partition measured for each architecture (docs/PERF.md).
  EXPECT_EQ(mintrain::ByteSchedulerConfig().partition_bytes(), 0);
  EXPECT_EQ(dist::default_partition_bytes(dist::BsArchitecture::A2A), 512 << 10);
  EXPECT_EQ(dist::default_partition_bytes(dist::BsArchitecture::PS), 128 << 10);
  EXPECT_TRUE(has(validation_error(bs_config("a2a", 4096, -1)), "dist.bytescheduler.credit_bytes must be >= 0"))
      << validation_error(bs_config("a2a", 4096, -1));
  const std::string ring = validation_error(bs_config("ring", 4096, 0));
  EXPECT_TRUE(has(ring, "unknown dist.bytescheduler.architecture \"ring\"") && has(ring, "a2a, ps")) << ring;
  EXPECT_TRUE(dist::uses_parameter_servers(bs_config("ps", 4096, 0)));
  EXPECT_FALSE(dist::uses_parameter_servers(bs_config("a2a", 4096, 0)));
}

// ---- Training ----

std::shared_ptr<layers::Module> tiny_mlp() { return mt::testing::tiny_mlp(7, kImage, kClasses); }

std::pair<Tensor, Tensor> shard(int step, int workers, int rank, int64_t classes = kClasses) {
  auto [x, y] = mt::testing::synthetic_batch(step, workers * kRowsPerWorker, kImage, classes);
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

std::vector<std::vector<float>> train_single(int steps, int workers) {
  auto model = tiny_mlp();
  auto opt = mt::testing::reference_sgd(*model);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = mt::testing::synthetic_batch(s, workers * kRowsPerWorker, kImage, kClasses);
    core::cross_entropy(model->forward(x), y).backward();
    opt->step();
    opt->zero_grad();
  }
  return mt::testing::weights_of(*model);
}

std::shared_ptr<dist::ProcessGroup> workers_of(const std::shared_ptr<dist::ProcessGroup>& world, int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return world->subgroup(ranks);
}

// Built through the registry, as the trainer builds it. `world`: null for "a2a".
std::unique_ptr<dist::Synchronizer> bs_sync(const std::shared_ptr<dist::ProcessGroup>& workers,
                                            const std::shared_ptr<dist::ProcessGroup>& world,
                                            const std::string& architecture, int64_t partition_bytes,
                                            int64_t credit_bytes, double max_grad_norm = 0) {
  mintrain::RunConfig run;
  *run.mutable_dist() = bs_config(architecture, partition_bytes, credit_bytes);
  run.mutable_dist()->set_timeout_seconds(20);
  run.mutable_optimizer()->set_max_grad_norm(max_grad_norm);
  return dist::make_synchronizer(workers, run, "same", nullptr, nullptr, world);
}

dist::PsServerOptions server_options(int workers, int servers, int64_t partition_bytes) {
  dist::PsServerOptions o;
  o.workers = workers;
  o.servers = servers;
  o.partition_bytes = partition_bytes;
  return o;
}

class ByteSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { core::set_num_threads(1); }
};

// One iteration as the trainer runs it.
void train_step(dist::Synchronizer& sync, optim::StepGuard& opt, layers::Module& model, int step, int workers,
                int rank, int64_t classes = kClasses) {
  sync.begin_iteration(step);
  auto [x, y] = shard(step, workers, rank, classes);
  core::cross_entropy(model.forward(x), y).backward();
  mt::testing::step(sync, opt);
  opt.zero_grad();
}

// The heart: K steps on N workers = K steps of one rank with N x the batch, for the all-to-all
// architecture and for 1, 2 and 3 servers (credit searched, so the credit changes mid-run too).
// The servers' counters show that every partition and the vote were pushed by every worker and
// summed there.
TEST_F(ByteSchedulerTest, AllToAllAndOneTwoThreeServersMatchOneRank) {
  constexpr int kSteps = 8, kWorkers = 2;
  const auto single = train_single(kSteps, kWorkers);
  for (int servers : {0, 1, 2, 3}) {
    const std::string what = servers == 0 ? std::string("bytescheduler/a2a")
                                          : "bytescheduler/ps with " + std::to_string(servers) + " servers";
    const auto result = mt::testing::run_ranks(kWorkers + servers, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      if (c.rank >= kWorkers) {
        dist::ParameterServer server(c.group, server_options(kWorkers, servers, kPartitionBytes));
        const dist::PsServerStats stats = server.run();
        EXPECT_EQ(stats.iterations, kSteps) << what;
        EXPECT_GT(stats.partitions, 0) << what << ": server " << server.index() << " got no partition";
        EXPECT_EQ(stats.pushes_received, kSteps * kWorkers * stats.partitions) << what;
        return;
      }
      auto workers = servers == 0 ? c.group : workers_of(c.group, kWorkers);
      auto model = tiny_mlp();
      auto opt = mt::testing::reference_sgd(*model);
      auto sync = bs_sync(workers, servers == 0 ? nullptr : c.group, servers == 0 ? "a2a" : "ps", kPartitionBytes, 0);
      auto& bs = dynamic_cast<dist::ByteSchedulerSynchronizer&>(*sync);
      EXPECT_EQ(bs.name(), servers == 0 ? "bytescheduler/a2a" : "bytescheduler/ps");
      sync->setup(*model, *opt);
      EXPECT_GT(bs.plan().size(), opt->params().size()) << "the first layer is cut into several partitions";
      EXPECT_TRUE(bs.searching_credit());
      for (int s = 0; s < kSteps; ++s) train_step(*sync, *opt, *model, s, kWorkers, c.rank);
      bs.finish();
      expect_close(mt::testing::weights_of(*model), single, what + ", worker " + std::to_string(c.rank));
    });
    EXPECT_TRUE(result.ok_or_report()) << what;
  }
}

// Three workers (sums of three) on the all-to-all architecture, credit given.
TEST_F(ByteSchedulerTest, ThreeWorkersAllToAllMatchOneRank) {
  constexpr int kSteps = 3, kWorkers = 3;
  const auto single = train_single(kSteps, kWorkers);
  const auto result = mt::testing::run_ranks(kWorkers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    auto model = tiny_mlp();
    auto opt = mt::testing::reference_sgd(*model);
    auto sync = bs_sync(c.group, nullptr, "a2a", kPartitionBytes, 2 * kPartitionBytes);
    sync->setup(*model, *opt);
    for (int s = 0; s < kSteps; ++s) train_step(*sync, *opt, *model, s, kWorkers, c.rank);
    sync->prepare_eval(*model);  // applies what is pending, as before an evaluation
    expect_close(mt::testing::weights_of(*model), single, "3 workers, worker " + std::to_string(c.rank));
  });
  EXPECT_TRUE(result.ok_or_report());
}

// A model whose last layer has many partitions and whose first layer has few: with a credit of
// one partition the engine cannot send the last layer's partitions as fast as backward makes
// them, so they still wait when layer 0's gradient is ready.
// 1024 classes: the last layer is 8 x 1024 floats, 128 partitions of 256 bytes.
std::shared_ptr<layers::Module> wide_mlp(int64_t classes) {
  core::Generator gen(11);
  return std::make_shared<layers::MLP>(kImage * kImage, std::vector<int64_t>{8}, classes, 0.0f, gen);
}

// The partition plan the workers make for wide_mlp (ids: 0 the vote, 1 + k partition k): which
// parameter each id belongs to, for a server that sees ids only.
std::vector<int64_t> param_of_id(int64_t classes) {
  auto model = wide_mlp(classes);
  std::vector<int64_t> numel;
  std::vector<size_t> order;
  for (const auto& p : model->parameters()) {
    order.push_back(numel.size());
    numel.push_back(p.numel());
  }
  std::vector<int64_t> param{-1};
  for (const auto& part : dist::plan_partitions(numel, order, kPartitionBytes, 1))
    param.push_back(static_cast<int64_t>(part.param));
  return param;
}

// The priority order and the gated forward on both architectures: what BSP (everything after
// backward, in one order) or WFBP (backward order) would never show. With a credit of one
// partition the workers start on the last layer's partitions during backward and send layer 0's
// before the rest of them, which were ready earlier; on the parameter server the credit comes
// back only with the server's receipt, so partitions queue there too (with the credit returned
// when Gloo has the bytes, nothing queues on loopback and nothing is overtaken), and the server
// answers in the order the pushes arrive: a last-layer partition first (a server answering in
// its table's order starts with the vote), layer 0's before the last layer's they overtook.
TEST_F(ByteSchedulerTest, LayerZeroOvertakesAndForwardRunsAheadOfTheExchange) {
  constexpr int kSteps = 10, kWorkers = 2;
  for (int servers : {0, 1}) {
    const std::string what = servers == 0 ? "a2a" : "ps";
    // The server answers on loopback faster than an allreduce goes round: give it 4x the
    // partitions, so that its answers still come while the next forward starts.
    const int64_t classes = servers == 0 ? 1024 : 4096;
    const auto result = mt::testing::run_ranks(kWorkers + servers, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      if (c.rank >= kWorkers) {
        const auto stats = dist::ParameterServer(c.group, server_options(kWorkers, servers, kPartitionBytes)).run();
        const std::vector<int64_t> param = param_of_id(classes);
        const auto& order = stats.last_answer_order;  // of the last iteration
        ASSERT_EQ(order.size(), param.size());
        const int64_t last_param = param.back() - 1;  // the last layer's weight (its bias is last)
        EXPECT_GE(param[static_cast<size_t>(order.front())], last_param)
            << "the server answered partition " << order.front() << " first, not one the workers pushed during "
            << "backward (a server answering in its table's order starts with the vote, id 0)";
        size_t layer0_last_answered = 0, last_layer_last_answered = 0;
        for (size_t i = 0; i < order.size(); ++i) {
          const int64_t p = param[static_cast<size_t>(order[i])];
          if (p == 0) layer0_last_answered = i;
          if (p == last_param) last_layer_last_answered = i;
        }
        EXPECT_LT(layer0_last_answered, last_layer_last_answered)
            << "layer 0's partitions should be answered before the last of the last layer's";
        return;
      }
      auto workers = servers == 0 ? c.group : workers_of(c.group, kWorkers);
      auto model = wide_mlp(classes);
      auto opt = mt::testing::reference_sgd(*model);
      auto sync = bs_sync(workers, servers == 0 ? nullptr : c.group, what, kPartitionBytes, kPartitionBytes);
      auto& bs = dynamic_cast<dist::ByteSchedulerSynchronizer&>(*sync);
      sync->setup(*model, *opt);
      const size_t last_param = opt->params().size() - 2;  // the last layer's weight
      // Backward pauses once the last layer's gradient is ready (a hook run after the
      // synchronizer's), as a deeper model's middle layers would make it: the engine starts on
      // the last layer's partitions and still has most of them queued when layer 0's is ready.
      opt->params()[last_param].register_grad_ready_hook(
          [](core::Tensor&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
      int64_t ran_ahead = 0;
      for (int s = 0; s < kSteps; ++s) {
        train_step(*sync, *opt, *model, s, kWorkers, c.rank, classes);
        if (s > 0) ran_ahead = std::max(ran_ahead, bs.unarrived_at_first_gate());
      }
      // The forward of the last step opened layer 0's gate while partitions of the step before
      // were still on their way.
      EXPECT_GT(ran_ahead, 0) << what << ": layer 0's forward never started before its exchange ended";
      bs.finish();
      const auto times = bs.last_exchange_times();
      const auto order = bs.last_send_order();
      const auto& plan = bs.plan();
      ASSERT_EQ(order.size(), plan.size() + 1);
      EXPECT_EQ(order.back() == 0, false) << "the vote goes first among what is ready, not last";
      // Where each item left, and the layer-0 items' ready times against the last layer's.
      std::vector<size_t> position(order.size());
      for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
      size_t last_layer_last_sent = 0, layer0_last_sent = 0;
      int overtaken = 0;
      for (size_t k = 0; k < plan.size(); ++k) {
        if (plan[k].param == 0) layer0_last_sent = std::max(layer0_last_sent, position[k + 1]);
        if (plan[k].param == last_param) last_layer_last_sent = std::max(last_layer_last_sent, position[k + 1]);
      }
      for (size_t a = 0; a < plan.size(); ++a) {
        if (plan[a].param != 0) continue;
        for (size_t b = 0; b < plan.size(); ++b) {
          if (plan[b].param != last_param) continue;
          // b was ready before a, yet a left first.
          if (times[b + 1].ready < times[a + 1].ready && position[a + 1] < position[b + 1]) ++overtaken;
        }
      }
      EXPECT_LT(layer0_last_sent, last_layer_last_sent)
          << what << ": every partition of layer 0 should leave before the last of the last layer's";
      EXPECT_GT(overtaken, 0) << what << ": no partition of layer 0 overtook one of the last layer's";
    });
    EXPECT_TRUE(result.ok_or_report()) << what;
  }
}

// The step guard's NaN/Inf check holds for the whole step: a NaN in one worker's gradient skips
// the update on every worker (every parameter, not only the one with the NaN), and the guard
// counts the skipped step.
TEST_F(ByteSchedulerTest, NanOnOneWorkerSkipsTheWholeStepEverywhere) {
  constexpr int kWorkers = 2;
  const auto result = mt::testing::run_ranks(kWorkers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    auto model = tiny_mlp();
    optim::SgdOptions so;
    so.lr = 0.1;
    optim::StepGuard guard(std::make_unique<optim::SGD>(model->parameters(), so), 0.0);
    auto sync = bs_sync(c.group, nullptr, "a2a", kPartitionBytes, 4 * kPartitionBytes);
    sync->setup(*model, guard);
    train_step(*sync, guard, *model, 0, kWorkers, c.rank);
    EXPECT_FALSE(guard.last_step_skipped());
    sync->prepare_eval(*model);
    const auto before = mt::testing::weights_of(*model);
    sync->begin_iteration(1);
    auto [x, y] = shard(1, kWorkers, c.rank);
    if (c.rank == 1) x.data<float>()[0] = std::nanf("");  // a bad example: NaN gradients in backward
    core::cross_entropy(model->forward(x), y).backward();
    mt::testing::step(*sync, guard);
    guard.zero_grad();
    EXPECT_TRUE(guard.last_step_skipped()) << "worker " << c.rank;
    EXPECT_EQ(guard.skipped_steps(), 1);
    sync->prepare_eval(*model);
    expect_close(mt::testing::weights_of(*model), before, "after the skipped step, worker " + std::to_string(c.rank));
  });
  EXPECT_TRUE(result.ok_or_report());
}

// A server killed mid-run stops every worker within the timeout, with an error naming it.
TEST_F(ByteSchedulerTest, KilledServerStopsEveryWorkerNamingIt) {
  constexpr int kWorkers = 2, kServers = 2, kTimeout = 3;
  const fs::path errors = fs::temp_directory_path() / ("mt_bytescheduler_kill_" + std::to_string(::getpid()));
  fs::remove_all(errors);
  fs::create_directories(errors);
  mt::testing::MultiprocessOptions o;
  o.group.timeout = std::chrono::seconds(kTimeout);
  o.timeout = std::chrono::seconds(60);
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      if (c.rank == kWorkers + 1) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(700));
          ::kill(::getpid(), SIGKILL);
        }).detach();
      }
      try {
        // The server as `mintrain train` runs it on a server's rank: the registry's, with the
        // config's partition size (a different one would fail worker 0's handshake).
        const mintrain::DistConfig d = bs_config("ps", kPartitionBytes, 0);
        dist::find_algorithm("bytescheduler").serve({c.group, d, kWorkers, kServers, nullptr});
      } catch (const std::exception&) {
        // Server 0 stops when the workers go; the test is about the workers.
      }
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::string error;
    try {
      auto model = tiny_mlp();
      auto opt = mt::testing::reference_sgd(*model);
      auto sync = bs_sync(workers_of(c.group, kWorkers), c.group, "ps", kPartitionBytes, 0);
      sync->setup(*model, *opt);
      for (int s = 0; s < 100000; ++s) {
        train_step(*sync, *opt, *model, s % 8, kWorkers, c.rank);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The worker that pushes to server 1 first names it; the other may instead find server 0
    // silent, which stops when the first worker is gone (it cannot sum without it): both say
    // which server failed them, and neither hangs.
    EXPECT_TRUE(has(error, "parameter server 1 (rank 3) is gone or silent") ||
                has(error, "parameter server 0 (rank 2) is gone or silent"))
        << "worker " << c.rank << ": " << error;
    EXPECT_LT(took, 0.7 + 2 * kTimeout + 3.0) << "worker " << c.rank << " took " << took << " s: " << error;
    std::ofstream(errors / ("worker" + std::to_string(c.rank))) << error;
  }, o);
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_EQ(result.ranks[3].signal, SIGKILL) << result.report();
  for (int r = 0; r < kWorkers; ++r) EXPECT_TRUE(result.ranks[r].ok()) << result.report();
  std::string all;
  for (int r = 0; r < kWorkers; ++r) {
    std::ifstream in(errors / ("worker" + std::to_string(r)));
    all += std::string(std::istreambuf_iterator<char>(in), {}) + "\n";
  }
  EXPECT_TRUE(has(all, "parameter server 1 (rank 3) is gone or silent")) << "no worker named the killed server: " << all;
  fs::remove_all(errors);
}

// Through the trainer (its modules' forward hooks, the step guard, the final evaluation): two
// workers learn the synthetic task, and rank 0 logs the plan and the credit search.
TEST_F(ByteSchedulerTest, TrainerLearnsWithByteScheduler) {
  const fs::path dir = fs::temp_directory_path() / ("mt_bytescheduler_train_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    std::ostringstream log0;
    auto tally = std::make_shared<mt::testing::Tally>();
    auto world = std::make_shared<mt::testing::CountingGroup>(ctx.group, mt::testing::world_members(2), tally);
    const double acc = mt::testing::train_synthetic_mlp(
        world, ctx.rank, (dir / "out").string(),
        {"dist.algorithm=bytescheduler", "dist.bytescheduler.partition_bytes=1024", "dist.bytescheduler.search_iters=2"},
        log0);
    if (ctx.rank == 0) {
      EXPECT_GT(acc, 60.0) << log0.str();
      EXPECT_TRUE(has(log0.str(), "ByteScheduler (bytescheduler/a2a)")) << log0.str();
      EXPECT_TRUE(has(log0.str(), "ByteScheduler credit search")) << log0.str();
      // What S-SGD BSP would not do: an allreduce per 1 KB partition (the MLP's 17 KB of
      // gradients: about 20 a step, 192 steps), not one per step.
      EXPECT_GT(tally->all_of("allreduce"), 4 * 192);
    }
  }, mo).ok_or_report());
  fs::remove_all(dir);
}

TEST_F(ByteSchedulerTest, ClippingByGlobalNormAndMissingServersAreRefused) {
  const auto result = mt::testing::run_ranks(1, [&](mt::testing::RankContext& c) {
    try {
      bs_sync(c.group, nullptr, "a2a", kPartitionBytes, 0, /*max_grad_norm=*/1.0);
      ADD_FAILURE() << "clipping accepted";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "optimizer.max_grad_norm")) << e.what();
    }
    try {
      bs_sync(c.group, nullptr, "ps", kPartitionBytes, 0);
      ADD_FAILURE() << "ps without servers accepted";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "--nservers")) << e.what();
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

}  // namespace
