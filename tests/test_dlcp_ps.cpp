// DLCP's parameter-server form (dist/dlcp/ps_worker.h, dist/dlcp/ps_server.h): workers and
// servers as forked processes of one loopback Gloo world (workers 0..N-1, servers after, as
// `mintrain launch --nservers S` places them), gradients over real UDP sockets. Checked: the
// worker's packing of partitions into one buffer per server; at p = 0 the sums equal Gloo's
// allreduce exactly (integer-valued floats; 2 workers with 1 and 2 servers, on a clean and on a
// faulty link), and training gives bit for bit the weights of the Gloo parameter server; with
// p > 0 and a known set of dropped push packets the sums are the partial sums (the dropped
// worker's values missing, counts 1) that plain averaging would not give, the server's
// exchange ends at the deadline, the loss is reported as the fraction of contributions (one per
// pushed packet), and error feedback keeps the lost values on their sender; settings that workers and servers must share are compared; bad
// dist.dlcp values are refused naming the field; a killed server is named by the workers and a
// killed worker by the servers; `launch --nservers` trains and writes the loss to the metrics.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/ops/nn.h"
#include "core/runtime.h"
#include "dist/registry.h"
#include "dist/flat.h"
#include "dist/dlcp/ps_layout.h"
#include "dist/dlcp/ps_server.h"
#include "dist/dlcp/ps_worker.h"
#include "dist/ps/ps_server.h"
#include "support/fault_injector.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using namespace mt::dist::dlcp;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kImage = 6, kClasses = 4, kRowsPerWorker = 4;
constexpr int kValuesPerPacket = 16;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::shared_ptr<layers::Module> tiny_mlp() { return mt::testing::tiny_mlp(7, kImage, kClasses); }

std::pair<Tensor, Tensor> shard(int step, int workers, int rank) {
  auto [x, y] = mt::testing::synthetic_batch(step, workers * kRowsPerWorker, kImage, kClasses);
  return {x.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous(),
          y.narrow(0, rank * kRowsPerWorker, kRowsPerWorker).contiguous()};
}

// Worker w's integer-valued input: exact in float whatever the order of the sum.
std::vector<float> input_of(int worker, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int((i * 7 + worker * 13) % 31) - 15 + 100 * worker);
  return v;
}

// The dist block both sides build from: 16 values per packet, partitions of 256 bytes (the
// tiny MLP's 576-float first layer is cut in 9), two paths on loopback.
mintrain::RunConfig dlcp_ps_run(double loss_bound, int deadline_ms, int timeout_s = 10) {
  mintrain::RunConfig run;
  auto* d = run.mutable_dist();
  d->set_algorithm("dlcp");
  d->set_timeout_seconds(timeout_s);
  auto* c = d->mutable_dlcp();
  c->set_architecture("ps");
  c->set_loss_bound(loss_bound);
  c->set_deadline_ms(deadline_ms);
  c->set_packet_bytes(48 + 4 * kValuesPerPacket);
  c->set_partition_bytes(256);
  c->add_paths("127.0.0.1");
  c->add_paths("127.0.0.2");
  return run;
}

std::shared_ptr<dist::ProcessGroup> workers_of(const std::shared_ptr<dist::ProcessGroup>& world, int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  return world->subgroup(ranks);
}

DlcpServerStats serve(const std::shared_ptr<dist::ProcessGroup>& world, int workers, int servers,
                      const mintrain::RunConfig& run, std::shared_ptr<FaultInjector> injector = nullptr) {
  DlcpServerOptions o;
  o.workers = workers;
  o.servers = servers;
  o.dlcp = dlcp_options_from(run.dist(), world->rank());
  if (injector) o.dlcp.injector = std::move(injector);
  return DlcpParameterServer(world, o).run();
}

// A worker's synchronizer as the trainer builds it (registry, dist.dlcp.architecture "ps").
std::unique_ptr<dist::Synchronizer> worker_sync(const std::shared_ptr<dist::ProcessGroup>& world, int workers,
                                                const mintrain::RunConfig& run,
                                                std::shared_ptr<FaultInjector> injector = nullptr) {
  if (!injector) return dist::make_synchronizer(workers_of(world, workers), run, "same", nullptr, nullptr, world);
  DlcpOptions o = dlcp_options_from(run.dist(), world->rank());
  o.config_text = "same";
  o.injector = std::move(injector);
  return std::make_unique<DlcpPsSynchronizer>(workers_of(world, workers), world, o);
}

// ---- Packing partitions into one buffer per server ----

TEST(DlcpPsLayout, EachServersSlicesMakeOneBufferAndComeBack) {
  // Parameters of 10, 3 and 25 floats, partitions of at most 8 floats, 2 servers.
  const std::vector<int64_t> numel = {10, 3, 25};
  const auto plan = dist::plan_partitions(numel, {2, 1, 0}, 32, 2);
  const auto buffers = server_buffers(plan, numel, 2, PriorityDirection::OutputFirst);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].elements + buffers[1].elements, 38u);
  std::vector<float> flat(38);
  std::iota(flat.begin(), flat.end(), 1.0f);
  std::vector<float> back(38, 0.0f);
  std::set<int64_t> covered;
  for (const ServerBuffer& b : buffers) {
    std::vector<float> buffer(b.elements, -1.0f);
    gather(b, flat.data(), buffer.data());
    for (const ServerSlice& s : b.slices)
      for (uint32_t i = 0; i < s.numel; ++i) {
        EXPECT_EQ(buffer[s.buffer_begin + i], flat[size_t(s.flat_begin + i)]);
        EXPECT_TRUE(covered.insert(s.flat_begin + i).second) << "element " << s.flat_begin + i << " twice";
      }
    scatter(b, buffer.data(), back.data());
    // A slice's layer is its parameter's: flat elements 0..9 are parameter 0, 10..12 parameter 1.
    for (const ServerSlice& s : b.slices) {
      const uint16_t expected = s.flat_begin < 10 ? 0 : s.flat_begin < 13 ? 1 : 2;
      EXPECT_EQ(b.layout.layer_at(s.buffer_begin), expected);
    }
  }
  EXPECT_EQ(covered.size(), 38u);
  EXPECT_EQ(back, flat);
  // A piece of a buffer maps onto the flat ranges of the slices it crosses.
  uint32_t pieces = 0;
  for_each_piece(buffers[0], 0, buffers[0].elements, [&](int64_t flat_at, uint32_t at, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) EXPECT_TRUE(covered.count(flat_at + i)) << at;
    pieces += n;
  });
  EXPECT_EQ(pieces, buffers[0].elements);
}

// ---- The sums ----

// Two workers push integer-valued gradients for three iterations; the pulled sums are Gloo's
// allreduce exactly and every count is 2. On the faulty link (drops, duplicates, reordering on
// every rank) the losses were resent.
void expect_sums_equal_gloo(int servers, bool faults) {
  constexpr int kWorkers = 2, kIterations = 3;
  const mintrain::RunConfig run = dlcp_ps_run(0.0, 5);
  const auto result = mt::testing::run_ranks(kWorkers + servers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    FaultPlan plan;
    plan.drop_fraction = 0.05, plan.duplicate_fraction = 0.03, plan.reorder_fraction = 0.05;
    plan.seed = 20 + c.rank;
    auto injector = faults ? std::make_shared<FaultInjector>(plan) : nullptr;
    if (c.rank >= kWorkers) {
      const DlcpServerStats s = serve(c.group, kWorkers, servers, run, injector);
      EXPECT_EQ(s.iterations, kIterations);
      EXPECT_EQ(s.pushes.packets_missing, 0u);
      EXPECT_EQ(s.pushes.packets_received, s.pushes.packets_expected);
      EXPECT_GT(s.pushes.packets_expected, 0u) << "server " << c.rank - kWorkers << " summed nothing";
      return;
    }
    auto workers = workers_of(c.group, kWorkers);
    auto model = tiny_mlp();
    auto opt = mt::testing::reference_sgd(*model);
    auto sync = worker_sync(c.group, kWorkers, run, injector);
    sync->setup(*model, *opt);
    auto& ps = dynamic_cast<DlcpPsSynchronizer&>(*sync);
    const size_t n = static_cast<size_t>(dist::total_numel(opt->params()));
    uint64_t retransmissions = 0;
    for (int it = 0; it < kIterations; ++it) {
      std::vector<float> mine = input_of(c.rank + it, n);
      Tensor reference = Tensor::from_vector(mine, {int64_t(n)});
      workers->allreduce(reference)->wait();
      std::vector<uint16_t> counts(n, 0);
      sync->begin_iteration(it);
      const ExchangeStats s = ps.push_pull(mine.data(), counts.data());
      EXPECT_EQ(mine, reference.to_vector()) << "iteration " << it;
      for (uint16_t k : counts) ASSERT_EQ(k, kWorkers);
      EXPECT_EQ(s.packets_missing, 0u);
      retransmissions += s.retransmissions;
    }
    if (faults) {
      EXPECT_GT(retransmissions, 0u) << "worker " << c.rank;
    }
    if (servers > 1) {
      EXPECT_GT(ps.buffers()[0].elements, 0u);
      EXPECT_GT(ps.buffers()[1].elements, 0u);
    }
  });
  EXPECT_TRUE(result.ok_or_report()) << servers << " servers" << (faults ? ", faulty link" : "");
}

TEST(DlcpPs, SumsEqualGlooAllreduceAtZeroLoss_OneServer) { expect_sums_equal_gloo(1, false); }
TEST(DlcpPs, SumsEqualGlooAllreduceAtZeroLoss_TwoServers) { expect_sums_equal_gloo(2, false); }
TEST(DlcpPs, SumsEqualGlooAllreduceAtZeroLossOnAFaultyLink_TwoServers) { expect_sums_equal_gloo(2, true); }

// Training at p = 0: the weights are those of the Gloo parameter server (BSP), bit for bit (the
// server sums in worker order in both; x / 2 and x * 0.5 are the same float), in the same
// processes one after the other.
TEST(DlcpPs, TrainsToTheWeightsOfTheGlooParameterServer) {
  constexpr int kWorkers = 2, kServers = 2, kSteps = 4;
  const mintrain::RunConfig run = dlcp_ps_run(0.0, 5);
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      EXPECT_EQ(serve(c.group, kWorkers, kServers, run).iterations, kSteps);
      dist::PsServerOptions o;
      o.workers = kWorkers, o.servers = kServers, o.partition_bytes = 256;
      dist::ParameterServer(c.group, o).run();
      return;
    }
    auto train = [&](std::unique_ptr<dist::Synchronizer> sync) {
      auto model = tiny_mlp();
      auto opt = mt::testing::reference_sgd(*model);
      sync->setup(*model, *opt);
      for (int s = 0; s < kSteps; ++s) {
        sync->begin_iteration(s);
        auto [x, y] = shard(s, kWorkers, c.rank);
        core::cross_entropy(model->forward(x), y).backward();
        mt::testing::step(*sync, *opt);
        opt->zero_grad();
      }
      if (auto* d = dynamic_cast<DlcpPsSynchronizer*>(sync.get())) {
        EXPECT_GT(d->total().packets_sent, 0u) << "the gradients went over DLCP";
        EXPECT_EQ(d->total().packets_missing, 0u);
        EXPECT_TRUE(has(sync->metrics_fields(), "\"dlcp_loss\":0,")) << "worker " << c.rank;
        EXPECT_TRUE(has(sync->epoch_summary(), "ms in push and pull per iteration"));
        EXPECT_EQ(sync->name(), "dlcp/ps over UDP");
      }
      return mt::testing::weights_of(*model);
    };
    const auto dlcp = train(worker_sync(c.group, kWorkers, run));
    mintrain::RunConfig gloo;
    gloo.mutable_dist()->set_algorithm("ps");
    gloo.mutable_dist()->mutable_ps()->set_schedule("bsp");
    gloo.mutable_dist()->mutable_ps()->set_partition_bytes(256);
    const auto reference = train(dist::make_synchronizer(workers_of(c.group, kWorkers), gloo, "same", nullptr, nullptr,
                                                         c.group));
    ASSERT_EQ(dlcp.size(), reference.size());
    for (size_t p = 0; p < dlcp.size(); ++p) EXPECT_EQ(dlcp[p], reference[p]) << "parameter " << p;
  });
  EXPECT_TRUE(result.ok_or_report());
}

// Worker 1's push packets 1 and 4 to server 0 never arrive (bucket = the server's index). p lets
// exactly those two be missing, so server 0 cannot end before every other packet arrived, and
// does end one deadline after the first: the sums there hold worker 0's values alone, count 1
// (plain averaging would have both). The pull is lossless: both workers get the same result.
// With error feedback worker 1 keeps the values of its two lost packets for the next iteration.
TEST(DlcpPs, KnownDropsGiveThePartialSumsAndEndAtTheDeadline) {
  constexpr int kWorkers = 2, kServers = 1;
  const std::set<uint32_t> dropped = {1, 4};
  const int deadline_ms = 300;
  // The tiny MLP's size decides the packets of server 0's one buffer.
  const int64_t n = dist::total_numel(mt::testing::reference_sgd(*tiny_mlp())->params());
  const uint32_t packets = TransferShape{uint32_t(n), uint16_t(kValuesPerPacket)}.packets();
  mintrain::RunConfig run = dlcp_ps_run((dropped.size() + 0.5) / packets, deadline_ms);
  run.mutable_dist()->mutable_dlcp()->set_error_feedback(true);
  FaultPlan plan;
  plan.drop_if = [&](const PacketHeader& h) {
    return h.kind == PacketKind::Data && h.sender == 1 && h.bucket == 0 && dropped.count(h.index) > 0;
  };
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      const DlcpServerStats s = serve(c.group, kWorkers, kServers, run);
      EXPECT_EQ(s.pushes.deadline_endings, 1u) << "worker 1's push ends at the deadline";
      EXPECT_EQ(s.pushes.packets_missing, dropped.size());
      // One contribution per lost push packet, of the workers' 2 x packets.
      EXPECT_DOUBLE_EQ(s.pushes.loss(), double(dropped.size()) / (kWorkers * packets));
      return;
    }
    auto workers = workers_of(c.group, kWorkers);
    auto model = tiny_mlp();
    auto opt = mt::testing::reference_sgd(*model);
    auto sync = worker_sync(c.group, kWorkers, run, c.rank == 1 ? std::make_shared<FaultInjector>(plan) : nullptr);
    sync->setup(*model, *opt);
    auto& ps = dynamic_cast<DlcpPsSynchronizer&>(*sync);
    ASSERT_EQ(ps.buffers().size(), 1u);
    const ServerBuffer& buffer = ps.buffers()[0];
    // Which flat elements the dropped packets held.
    std::set<int64_t> lost;
    const TransferShape shape{buffer.elements, uint16_t(kValuesPerPacket)};
    for (uint32_t p : dropped)
      for_each_piece(buffer, shape.offset_of(p), shape.offset_of(p) + shape.count_of(p),
                     [&](int64_t flat_at, uint32_t, uint32_t k) {
                       for (uint32_t i = 0; i < k; ++i) lost.insert(flat_at + i);
                     });
    ASSERT_EQ(lost.size(), dropped.size() * kValuesPerPacket);
    std::vector<float> mine = input_of(c.rank, size_t(n));
    Tensor full = Tensor::from_vector(mine, {n});
    workers->allreduce(full)->wait();
    const std::vector<float> w0 = input_of(0, size_t(n));
    std::vector<uint16_t> counts(size_t(n), 0);
    sync->begin_iteration(0);
    const auto start = Clock::now();
    const ExchangeStats s = ps.push_pull(mine.data(), counts.data());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const std::vector<float> sums = full.to_vector();
    int differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool gone = lost.count(i) > 0;
      ASSERT_EQ(mine[size_t(i)], gone ? w0[size_t(i)] : sums[size_t(i)]) << i;
      ASSERT_EQ(counts[size_t(i)], gone ? 1 : 2) << i;
      differ += mine[size_t(i)] != sums[size_t(i)];
    }
    EXPECT_GT(differ, 0) << "plain averaging would give the full sums";
    const std::vector<float> input = input_of(c.rank, size_t(n));
    ASSERT_EQ(ps.residual().size(), size_t(n));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(ps.residual()[size_t(i)], c.rank == 1 && lost.count(i) ? input[size_t(i)] : 0.0f) << i;
    if (c.rank == 1) {
      EXPECT_EQ(ps.last_push().retransmissions, 0u) << "the loss stays within p: nothing is resent";
      EXPECT_EQ(s.packets_missing, dropped.size()) << "the server did not acknowledge the dropped packets";
    }
    // Each worker's share of the contributions is its pushed packets; worker 1 lost two of them
    // (the lossless pull loses none).
    EXPECT_EQ(s.contributions, packets);
    EXPECT_DOUBLE_EQ(s.loss(), c.rank == 1 ? double(dropped.size()) / packets : 0.0);
    EXPECT_GE(seconds, deadline_ms / 1000.0 * 0.95) << "ended before the deadline";
    EXPECT_LT(seconds, deadline_ms / 1000.0 + 1.5) << "ended long after the deadline";
  });
  EXPECT_TRUE(result.ok_or_report());
}

// ---- Config and set-up errors ----

TEST(DlcpPsConfig, BadValuesAreRefusedNamingTheField) {
  auto refused = [](const std::function<void(mintrain::DistConfig&)>& set, const std::string& field) {
    mintrain::DistConfig d;
    d.set_algorithm("dlcp");
    set(d);
    try {
      dist::validate_dist_config(d);
      ADD_FAILURE() << field << ": accepted";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), field)) << e.what();
    }
  };
  refused([](auto& d) { d.mutable_dlcp()->set_architecture("star"); }, "dist.dlcp.architecture");
  refused([](auto& d) { d.mutable_dlcp()->set_partition_bytes(2); }, "dist.dlcp.partition_bytes");
  refused([](auto& d) { d.mutable_dlcp()->set_lossless_pull(false); }, "dist.dlcp.lossless_pull");
  refused([](auto& d) {
    d.mutable_dlcp()->set_architecture("ps");
    d.mutable_dlcp()->set_lossless_allgather(false);
  }, "dist.dlcp.lossless_allgather");
  mintrain::DistConfig good;
  good.set_algorithm("dlcp");
  good.mutable_dlcp()->set_architecture("PS");
  good.mutable_dlcp()->set_lossless_pull(false);
  dist::normalize_dist_names(good);
  EXPECT_NO_THROW(dist::validate_dist_config(good));
  EXPECT_TRUE(dist::uses_parameter_servers(good));
  good.mutable_dlcp()->set_architecture("ring");
  EXPECT_FALSE(dist::uses_parameter_servers(good));

  // Without servers the PS form says how to start them; with servers the ring says to pick "ps".
  const auto result = mt::testing::run_ranks(3, [](mt::testing::RankContext& c) {
    mintrain::RunConfig run = dlcp_ps_run(0.01, 20);
    try {
      dist::make_synchronizer(c.group, run, "same");
      ADD_FAILURE() << "made without servers";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "dist.dlcp.architecture \"ps\" needs parameter servers: start them with `mintrain "
                                "launch --nservers S`")) << e.what();
    }
    run.mutable_dist()->mutable_dlcp()->set_architecture("ring");
    if (c.rank == 2) return;  // the "server": only the workers build a synchronizer on their subgroup
    try {
      dist::make_synchronizer(workers_of(c.group, 2), run, "same", nullptr, nullptr, c.group);
      ADD_FAILURE() << "the ring accepted servers";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "dist.dlcp.architecture is \"ring\"")) << e.what();
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// A server started with another loss bound: every rank refuses at connection, naming both.
TEST(DlcpPsConfig, ServerWithOtherSettingsIsRefusedNamingBoth) {
  constexpr int kWorkers = 2, kServers = 1;
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    try {
      if (c.rank >= kWorkers) {
        serve(c.group, kWorkers, kServers, dlcp_ps_run(0.02, 20));
      } else {
        auto model = tiny_mlp();
        auto opt = mt::testing::reference_sgd(*model);
        worker_sync(c.group, kWorkers, dlcp_ps_run(0.01, 20))->setup(*model, *opt);
      }
      ADD_FAILURE() << "rank " << c.rank << " accepted";
    } catch (const core::Error& e) {
      EXPECT_TRUE(has(e.what(), "loss_bound=0.02")) << e.what();
      EXPECT_TRUE(has(e.what(), "loss_bound=0.01")) << e.what();
      EXPECT_TRUE(has(e.what(), "the same dist.dlcp")) << e.what();
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// ---- Faults: a dead rank is named within the timeout ----

using mt::testing::fault_options;

std::string train_until_error(const std::shared_ptr<dist::ProcessGroup>& world, int workers, int rank,
                              const mintrain::RunConfig& run) {
  return mt::testing::train_until_error([&] { return worker_sync(world, workers, run); }, workers, rank,
                                        kRowsPerWorker, kImage, kClasses);
}

using mt::testing::die_after;

TEST(DlcpPsFaults, KilledServerIsNamedByEveryWorker) {
  constexpr int kWorkers = 2, kServers = 2, kTimeout = 3;
  const mintrain::RunConfig run = dlcp_ps_run(0.0, 5, kTimeout);
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      if (c.rank == kWorkers + 1) die_after(std::chrono::milliseconds(700));  // server 1, mid-run
      try {
        serve(c.group, kWorkers, kServers, run);
      } catch (const std::exception&) {
        // Server 0 stops when the workers go; the test is about the workers.
      }
      return;
    }
    const auto start = Clock::now();
    const std::string error = train_until_error(c.group, kWorkers, c.rank, run);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(has(error, "parameter server 1 (rank 3)")) << "worker " << c.rank << ": " << error;
    EXPECT_LT(took, 0.7 + 2 * kTimeout + 3.0) << "worker " << c.rank << " took " << took << " s: " << error;
  }, fault_options(kTimeout));
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_EQ(result.ranks[3].signal, SIGKILL) << result.report();
  for (int r = 0; r < kWorkers; ++r) EXPECT_TRUE(result.ranks[r].ok()) << result.report();
}

TEST(DlcpPsFaults, KilledWorkerIsNamedByTheServers) {
  constexpr int kWorkers = 2, kServers = 2, kTimeout = 3;
  const mintrain::RunConfig run = dlcp_ps_run(0.0, 5, kTimeout);
  const auto result = mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    if (c.rank >= kWorkers) {
      const auto start = Clock::now();
      std::string error;
      try {
        serve(c.group, kWorkers, kServers, run);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const double took = std::chrono::duration<double>(Clock::now() - start).count();
      EXPECT_TRUE(has(error, "worker 1 (rank 1)")) << "rank " << c.rank << ": " << error;
      EXPECT_TRUE(has(error, "parameter server " + std::to_string(c.rank - kWorkers))) << error;
      EXPECT_LT(took, 0.7 + 2 * kTimeout + 3.0) << "rank " << c.rank << " took " << took << " s: " << error;
      return;
    }
    if (c.rank == 1) die_after(std::chrono::milliseconds(700));
    EXPECT_FALSE(train_until_error(c.group, kWorkers, c.rank, run).empty());
  }, fault_options(kTimeout));
  ASSERT_EQ(result.ranks.size(), 4u);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL) << result.report();
  for (int r : {0, 2, 3}) EXPECT_TRUE(result.ranks[r].ok()) << result.report();
}

// ---- The command line: `mintrain launch --nservers` with dist.dlcp.architecture "ps" ----

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(DlcpPsLaunch, LaunchStartsDlcpServersAndWritesTheLossToTheMetrics) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_dlcp_ps_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";
  const std::string cmd = "cd " + dir.string() + " && OMP_NUM_THREADS=1 timeout 120 " + std::string(MT_BINARY_DIR) +
                          "/apps/mintrain launch --nproc-per-node 2 --nservers 2 -- train " + config +
                          " --output run --set epochs=1 --set dist.algorithm=dlcp --set dist.dlcp.architecture=ps"
                          " --set dist.dlcp.loss_bound=0.05 --set dist.dlcp.inject_loss=0.1"
                          " --set dist.dlcp.deadline_ms=5 --set dist.dlcp.packet_bytes=256"
                          " --set dist.dlcp.partition_bytes=4096 --set dist.timeout_seconds=20"
                          " --set logging.metrics_every_iters=4 >out 2>err </dev/null";
  const int status = std::system(cmd.c_str());
  const std::string out = slurp(dir / "out"), err = slurp(dir / "err");
  EXPECT_EQ(status, 0) << out << err;
  EXPECT_TRUE(has(out, "[rank 0] distributed: dlcp/ps")) << out;
  EXPECT_TRUE(has(out, "[rank 0] dlcp: parameter-server form, 2 servers")) << out;
  EXPECT_TRUE(has(out, "[server 0] parameter server 0 (rank 2): serving")) << out;
  EXPECT_TRUE(has(out, "[server 1] parameter server 1 (rank 3): done after 16 iterations")) << out;
  EXPECT_TRUE(has(out, "ms in push and pull per iteration")) << out;
  const std::vector<double> loss = mt::testing::train_record_values((dir / "run" / "metrics.jsonl").string(),
                                                                    "dlcp_loss", "dlcp_retransmissions");
  ASSERT_FALSE(loss.empty()) << "no train record with dlcp_loss and dlcp_retransmissions";
  const double mean = std::accumulate(loss.begin(), loss.end(), 0.0) / loss.size();
  // 10% of the data packets dropped on every rank, pushes may keep up to 5% lost, pulls none.
  EXPECT_GT(mean, 0.0);
  EXPECT_LE(mean, 0.05 + 1e-9);
  fs::remove_all(dir);
}

}  // namespace
