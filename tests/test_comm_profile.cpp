// The communication profile end to end: dist::profile_communication on a real two-rank Gloo
// world, `mintrain profile-comm` as launched workers, and `mintrain model --comm-profile`
// turning a profile into the network of its predictions (latency, bandwidth efficiency, gamma).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "apps/model_command.h"
#include "apps/profile_comm_command.h"
#include "core/tensor.h"
#include "dist/predict/comm_profile.h"
#include "dist/predict/network_model.h"
#include "dist/predict/scaling.h"
#include "support/comm_profile_commands.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

namespace {

using mt::testing::contains;
using mt::testing::error_of;
using mt::testing::write_file;
using mt::testing::model_output;
using mt::testing::profile_comm_error;

const std::string kMlpConfig = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";

// Few, so the whole file runs in seconds on two busy cores; far apart (1 KB to 16 MB), so that
// on a loaded machine the cost per byte still stands out of the scheduling noise.
mt::dist::CommProfileOptions quick_options() {
  mt::dist::CommProfileOptions o;
  o.sizes_floats = {256, 1 << 20, 1 << 22};
  o.repeats = 3;
  o.seconds_per_size = 0;  // exactly `repeats` per size
  o.gamma_messages = 4;
  o.gamma_rounds = 2;
  o.gamma_chunk_seconds = 0.002;
  return o;
}

// Two layers with small gradients (1000 bytes each): compute-bound, so gamma shows in WFBP.
std::string write_small_layers(const std::string& dir) {
  const std::string path = dir + "/layers.json";
  write_file(path, R"({"model": "hand", "batch_size": 32, "update_seconds": 0.0005,
    "buffer_bytes": 0, "compress_seconds": 0.0002, "decode_seconds": 0.0001,
    "layers": [{"name": "a", "forward": 0.001, "backward": 0.002, "bytes": 1000},
               {"name": "b", "forward": 0.001, "backward": 0.001, "bytes": 1000}]})");
  return path;
}

// The timed allreduces it lists are of 1000 and 2000 bytes (the messages of write_small_layers'
// model), at the line's times unless `measured` gives others (the measured curve, at N = world).
// overlap_slowdown > 0: written too (profiles before it was measured have none).
// `extra`: more of the profile's entries, e.g. ", \"busy_bytes\": [...]".
std::string write_comm_profile(const std::string& path, int world, double alpha, double beta, double gamma,
                               std::vector<double> measured = {}, double overlap_slowdown = 0,
                               const std::string& extra = "") {
  if (measured.empty()) measured = {alpha + beta * 1000, alpha + beta * 2000};
  std::ostringstream os;
  os.precision(12);
  os << "{\"world\": " << world << ", \"group\": \"gloo/tcp world of " << world << "\", \"alpha_s\": " << alpha
     << ", \"beta_s_per_byte\": " << beta << ", \"gamma_s\": " << gamma
     << (overlap_slowdown > 0 ? ", \"overlap_slowdown\": " + std::to_string(overlap_slowdown) : std::string())
     << ", \"chunk_alone_s\": 0.004, \"chunk_with_message_s\": 0.005, \"bytes\": [2000, 1000, 2000], "
     << "\"seconds\": [" << measured[1] * 0.5 << ", " << measured[0] << ", " << measured[1] * 1.5 << "]" << extra
     << "}";
  write_file(path, os.str());
  return path;
}

// The row of N in the prediction table, e.g. "     4     54.100 ( 10%) ...".
std::string table_row(const std::string& out, int workers) {
  std::istringstream in(out.substr(out.find("milliseconds per iteration")));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int n = 0;
    if (fields >> n && n == workers && line.find('%') != std::string::npos) return line;
  }
  return "";
}

}  // namespace

TEST(CommProfile, MeasuresATwoRankGlooWorld) {
  const std::string dir = mt::testing::make_temp_dir("mt_comm_profile");
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& c) {
    const mt::dist::CommProfileOptions o = quick_options();
    const mt::dist::CommProfile p = mt::dist::profile_communication(*c.group, mt::core::Device::cpu(), o);
    EXPECT_EQ(p.world, 2);
    ASSERT_EQ(p.bytes.size(), o.sizes_floats.size() * o.repeats);
    ASSERT_EQ(p.seconds.size(), p.bytes.size());
    EXPECT_EQ(p.bytes.front(), 256 * 4.0);
    EXPECT_EQ(p.bytes.back(), (1 << 22) * 4.0);
    for (double s : p.seconds) EXPECT_TRUE(std::isfinite(s) && s > 0) << s;
    EXPECT_GE(p.cost.alpha, 0.0);
    EXPECT_GT(p.cost.beta, 0.0);
    EXPECT_TRUE(std::isfinite(p.cost.gamma) && p.cost.gamma >= 0) << p.cost.gamma;
    EXPECT_GT(p.chunk_alone_seconds, 0.0);  // gamma was measured, not skipped
    EXPECT_GE(p.cost.overlap_slowdown, 0.0);
    EXPECT_LE(p.cost.overlap_slowdown, 0.9);
    // Every size again while every rank computed: rank 0's means as the during-compute curve.
    EXPECT_EQ(p.busy_bytes, p.bytes);
    ASSERT_EQ(p.cost.busy_measured_seconds.size(), o.sizes_floats.size());
    for (double s : p.cost.busy_measured_seconds) EXPECT_GT(s, 0.0);
    // Every rank uses rank 0's fit: the sum over the ranks is twice each rank's own value.
    auto both = mt::core::Tensor::from_vector(
        std::vector<float>{static_cast<float>(p.cost.alpha * 1e6), static_cast<float>(p.cost.beta * 1e9)}, {2});
    const std::vector<float> mine = both.to_vector();
    c.group->allreduce(both)->wait();
    const std::vector<float> sum = both.to_vector();
    EXPECT_FLOAT_EQ(sum[0], 2 * mine[0]);
    EXPECT_FLOAT_EQ(sum[1], 2 * mine[1]);
    // ... and rank 0's measured curve: one mean per size, in ascending order.
    ASSERT_EQ(p.cost.measured_bytes.size(), o.sizes_floats.size());
    EXPECT_EQ(p.cost.measured_bytes.front(), 256 * 4.0);
    auto curve = mt::core::Tensor::from_vector(
        std::vector<float>(p.cost.measured_seconds.begin(), p.cost.measured_seconds.end()),
        {static_cast<int64_t>(p.cost.measured_seconds.size())});
    const std::vector<float> own_curve = curve.to_vector();
    c.group->allreduce(curve)->wait();
    for (size_t k = 0; k < own_curve.size(); ++k) EXPECT_FLOAT_EQ(curve.to_vector()[k], 2 * own_curve[k]);

    if (c.rank == 0) {
      // The JSON reads back through `mintrain model`'s reader.
      const std::string path = dir + "/measured.json";
      write_file(path, mt::dist::comm_profile_json(p));
      const mt::dist::MeasuredComm m = mt::dist::read_comm_profile(path);
      EXPECT_EQ(m.world, 2);
      EXPECT_NEAR(m.cost.alpha, p.cost.alpha, 1e-8 * std::max(1.0, p.cost.alpha));
      EXPECT_NEAR(m.cost.beta, p.cost.beta, 1e-8 * p.cost.beta);
      EXPECT_NEAR(m.cost.gamma, p.cost.gamma, 1e-8);
      EXPECT_NEAR(m.cost.overlap_slowdown, p.cost.overlap_slowdown, 1e-8);
      ASSERT_EQ(m.cost.busy_measured_seconds.size(), p.cost.busy_measured_seconds.size());
      for (size_t k = 0; k < m.cost.busy_measured_seconds.size(); ++k)
        EXPECT_NEAR(m.cost.busy_measured_seconds[k], p.cost.busy_measured_seconds[k],
                    1e-6 * p.cost.busy_measured_seconds[k]);
      EXPECT_EQ(m.group, p.group);
      const std::string table = mt::apps::comm_profile_table(p);
      EXPECT_TRUE(contains(table, "fit T(M) = alpha + beta * M"));
      EXPECT_TRUE(contains(table, "16777216"));  // the largest size's row
      EXPECT_TRUE(contains(table, "gamma "));
      EXPECT_TRUE(contains(table, "% of the compute lost while the network is busy"));
      EXPECT_TRUE(contains(table, "computing ms"));
    }
  }).ok_or_report());
}

// `mintrain profile-comm` as two workers of a launcher (the torchrun variables), then the file it
// wrote drives `mintrain model`.
// Sizes that are quick get more repeats, up to seconds_per_size and max_repeats, and every rank
// runs the same number (a collective count: rank 0's decision).
TEST(CommProfile, RepeatsQuickSizesUntilTheyFillTheirTimeAndAllRanksAgree) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& c) {
    mt::dist::CommProfileOptions o;
    o.sizes_floats = {64, 1 << 20};
    o.repeats = 2;
    o.seconds_per_size = 1.0;
    o.max_repeats = 12;
    o.measure_gamma = false;
    const mt::dist::CommProfile p = mt::dist::profile_communication(*c.group, mt::core::Device::cpu(), o);
    ASSERT_EQ(p.size_bytes.size(), 2u);
    std::vector<double> times[2];
    for (size_t i = 0; i < p.bytes.size(); ++i) times[p.bytes[i] == p.size_bytes[0] ? 0 : 1].push_back(p.seconds[i]);
    // 64 floats take far less than 1 s / 12 even on two busy cores: the cap decides.
    EXPECT_EQ(times[0].size(), 12u);
    EXPECT_GE(times[1].size(), 2u);
    EXPECT_LE(times[1].size(), 12u);
    // In turn, not one size after another: the first cycles hold one of each.
    ASSERT_GE(p.bytes.size(), 4u);
    EXPECT_EQ(std::vector<double>(p.bytes.begin(), p.bytes.begin() + 4), (std::vector<double>{256, 4 << 20, 256, 4 << 20}));
    for (int k = 0; k < 2; ++k) {  // what the fit used: the mean without the fastest and slowest tenth
      std::sort(times[k].begin(), times[k].end());
      const size_t cut = times[k].size() / 10;
      const double kept = std::accumulate(times[k].begin() + cut, times[k].end() - cut, 0.0);
      EXPECT_NEAR(p.size_mean_seconds[k], kept / (times[k].size() - 2 * cut), 1e-12);
    }
    auto count = mt::core::Tensor::from_vector(std::vector<float>{static_cast<float>(p.bytes.size())}, {1});
    c.group->allreduce(count)->wait();
    EXPECT_FLOAT_EQ(count.item(), 2.0f * static_cast<float>(p.bytes.size()));
  }).ok_or_report());
}

// In training the network idles while a rank computes, and a link may be faster after idling (a
// token bucket refills): idle_before_seconds times every size a second time, each allreduce after
// that long a wait that is left out of its time, and the cost gets both curves.
TEST(CommProfile, TimesEverySizeAgainAfterIdlingWithoutTimingTheIdle) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& c) {
    mt::dist::CommProfileOptions o;
    o.sizes_floats = {64, 256};
    o.repeats = 3;
    o.seconds_per_size = 0;  // exactly 3 each
    o.measure_gamma = false;
    o.idle_before_seconds = 0.25;
    const auto start = std::chrono::steady_clock::now();
    const mt::dist::CommProfile p = mt::dist::profile_communication(*c.group, mt::core::Device::cpu(), o);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(p.seconds.size(), 6u);       // back to back ...
    ASSERT_EQ(p.idle_seconds.size(), 6u);  // ... and again after idling
    EXPECT_EQ(p.idle_bytes, (std::vector<double>{256, 1024, 256, 1024, 256, 1024}));  // in turn
    EXPECT_EQ(p.bytes, p.idle_bytes);
    EXPECT_GE(wall, 6 * 0.25);  // every allreduce of the second round waited first ...
    for (double t : p.idle_seconds) EXPECT_LT(t, 0.25);  // ... and its time is the allreduce alone
    EXPECT_EQ(p.idle_before_seconds, 0.25);
    EXPECT_EQ(p.cost.idle_measured, 0.25);
    ASSERT_EQ(p.cost.idle_measured_seconds.size(), 2u);
    EXPECT_GT(p.cost.idle_measured_seconds[0], 0.0);
    if (c.rank == 0) {
      const std::string table = mt::apps::comm_profile_table(p);
      EXPECT_TRUE(contains(table, "6 in all over 2 sizes back to back, 6 more after 250.0 ms idle each")) << table;
      EXPECT_TRUE(contains(table, "after idle ms")) << table;
      const std::string json = mt::dist::comm_profile_json(p);
      EXPECT_TRUE(contains(json, "\"idle_before_s\": 0.25,")) << json;
      EXPECT_TRUE(contains(json, "\"idle_bytes\": [256, 1024, 256, 1024, 256, 1024]")) << json;
    }
  }).ok_or_report());
}

// start_together: every timed allreduce begins after a barrier of the agreeing group, so a rank
// that arrives late costs the others barrier time, not allreduce time (DS-Sync's groups time
// their partitions that way, all contending in every repeat). Without it, the late start is in
// the time of the rank that waited.
TEST(CommProfile, StartTogetherKeepsALateRanksArrivalOutOfTheTimes) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& c) {
    mt::dist::CommProfileOptions o;
    o.repeats = 1;
    o.seconds_per_size = 0;
    for (const bool together : {false, true}) {
      o.start_together = together;
      c.group->barrier();
      if (c.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
      const std::vector<double> t = mt::dist::time_allreduces(c.group.get(), *c.group, mt::core::Device::cpu(), 64, 0, o);
      ASSERT_EQ(t.size(), 1u);
      if (c.rank == 0) {
        if (together) EXPECT_LT(t[0], 0.3);
        else EXPECT_GE(t[0], 0.3);
      }
    }
  }).ok_or_report());
}

// The fit goes through the mean of each size with its tail (an iteration pays for the sum of its
// messages, so a stall in every fifth counts for a fifth), but without the extreme tenth at each
// end (a rare retransmission timeout of half a second would swamp fifty 2 ms operations).
TEST(CommProfile, TrimmedMeanPerSizeKeepsTheTailButNotTheRareStall) {
  std::vector<double> sizes, means;
  mt::dist::trimmed_mean_per_size({4096, 1024, 4096, 1024, 1024, 1024, 1024}, {0.004, 0.001, 0.006, 0.001, 0.001, 0.001, 0.011},
                                  sizes, means);
  ASSERT_EQ(sizes, (std::vector<double>{4096, 1024}));
  EXPECT_NEAR(means[0], 0.005, 1e-15);
  EXPECT_NEAR(means[1], 0.003, 1e-15);  // fewer than 10 runs: nothing dropped (the median says 0.001)
  // Ten runs: five quick, four stalled by a scheduler tick, one by a retransmission timeout.
  mt::dist::trimmed_mean_per_size(std::vector<double>(10, 1024),
                                  {0.001, 0.003, 0.001, 0.5, 0.003, 0.001, 0.003, 0.001, 0.003, 0.001}, sizes, means);
  ASSERT_EQ(sizes.size(), 1u);
  EXPECT_NEAR(means[0], 0.002, 1e-15);  // one 0.001 and the 0.5 dropped; the ticks stay
  EXPECT_TRUE(contains(error_of([] {
                         std::vector<double> a, b;
                         mt::dist::trimmed_mean_per_size({1, 2}, {0.1}, a, b);
                       }),
                       "2 sizes but 1 times"));
}

TEST(CommProfile, CommandWritesAProfileTheModelReads) {
  const std::string dir = mt::testing::make_temp_dir("mt_comm_profile_cmd");
  const std::string path = dir + "/comm.json";
  mt::testing::MultiprocessOptions mo;
  mo.create_store = false;  // the command does its own rendezvous
  mo.create_group = false;
  EXPECT_TRUE(mt::testing::run_ranks(
                  2,
                  [&](mt::testing::RankContext& c) {
                    ::setenv("RANK", std::to_string(c.rank).c_str(), 1);
                    ::setenv("WORLD_SIZE", "2", 1);
                    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
                    ::setenv("MASTER_PORT", std::to_string(c.port).c_str(), 1);
                    std::ostringstream out;
                    EXPECT_EQ(mt::apps::run_profile_comm_command(
                                  {"--out", path, "--sizes", "256,4194304", "--repeats", "2", "--seconds-per-size", "0.05",
                                   "--idle-ms", "20", "--gamma-rounds", "1",
                                   "--gamma-messages", "4", "--gamma-chunk-ms", "2", "--gamma-message-floats", "1024",
                                   "--timeout-seconds", "20"},
                                  out),
                              0);
                    if (c.rank == 0) {
                      EXPECT_TRUE(contains(out.str(), "communication profile: gloo"));
                      EXPECT_TRUE(contains(out.str(), "wrote " + path));
                    } else {
                      EXPECT_EQ(out.str(), "");  // rank 0 speaks for the job
                    }
                  },
                  mo)
                  .ok_or_report());
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const mt::dist::MeasuredComm m = mt::dist::read_comm_profile(path);
  EXPECT_EQ(m.world, 2);
  EXPECT_GT(m.cost.beta, 0.0);
  const std::string out = model_output({kMlpConfig, "--layer-times", write_small_layers(dir), "--workers", "1,2",
                                     "--comm-profile", path});
  EXPECT_TRUE(contains(out, "comm profile: " + path + ", measured on n = 2 ranks"));
  EXPECT_TRUE(contains(out, "after 20.0 ms or more of idle network, the time measured after idling")) << out;
}

TEST(CommProfile, ModelTakesLatencyEfficiencyAndGammaFromTheProfile) {
  const std::string dir = mt::testing::make_temp_dir("mt_comm_profile_model");
  const std::string layers = write_small_layers(dir);
  // Measured on 4 ranks: alpha 600 us (6 hops: 100 us each), beta 2.4e-8 s/B. The nominal ring
  // of 1 Gbit/s links on 4 ranks: 2*3/4 / 1.25e8 = 1.2e-8 s/B, so efficiency 0.5: 0.5 Gbit/s.
  const std::string no_gamma = write_comm_profile(dir + "/g0.json", 4, 600e-6, 2.4e-8, 0.0);
  const std::string with_gamma = write_comm_profile(dir + "/g1.json", 4, 600e-6, 2.4e-8, 0.001);

  mt::dist::NetworkSpec nominal;
  nominal.bandwidth_gbps = 1;
  nominal.latency_us = 50;
  const mt::dist::CalibratedNetwork c = mt::dist::calibrate_network(nominal, true, {mt::dist::read_comm_profile(no_gamma)});
  EXPECT_NEAR(c.efficiency, 0.5, 1e-12);
  EXPECT_NEAR(c.latency_us, 100.0, 1e-9);
  EXPECT_NEAR(c.spec.bandwidth_gbps, 0.5, 1e-12);
  EXPECT_NEAR(c.spec.latency_us, 100.0, 1e-9);
  // At n = world the calibrated ring is the measurement; at 8 it follows the ring's formula.
  const mt::dist::NetworkModel net(c.spec);
  EXPECT_NEAR(net.allreduce(4).alpha, 600e-6, 1e-15);
  EXPECT_NEAR(net.allreduce(4).beta, 2.4e-8, 1e-20);
  EXPECT_NEAR(net.allreduce(8).alpha, 14 * 100e-6, 1e-15);
  EXPECT_NEAR(net.allreduce(8).beta, 2.0 * 7 / 8 / (0.5e9 / 8), 1e-20);
  // Without a bandwidth: the measured ring's link rate, 2*3/4 / 2.4e-8 B/s = 0.5 Gbit/s, one level.
  mt::dist::NetworkSpec racks = nominal;
  racks.ranks_per_rack = 2;
  racks.inter_bandwidth_gbps = 0.1;
  const auto plain = mt::dist::calibrate_network(nominal, false, {mt::dist::read_comm_profile(no_gamma)});
  EXPECT_NEAR(plain.spec.bandwidth_gbps, 0.5, 1e-12);
  EXPECT_EQ(plain.efficiency, 0.0);
  // With racks, every level is scaled (the ring at 4 crosses the 0.1 Gbit/s uplink: nominal beta
  // 1.5 / 1.25e7 = 1.2e-7, e = 5, clamped to 1.5).
  const auto scaled = mt::dist::calibrate_network(racks, true, {mt::dist::read_comm_profile(no_gamma)});
  EXPECT_DOUBLE_EQ(scaled.efficiency, 1.5);
  EXPECT_NEAR(scaled.unclamped_efficiency, 5.0, 1e-12);
  EXPECT_NEAR(scaled.spec.inter_bandwidth_gbps, 0.15, 1e-12);
  EXPECT_NEAR(scaled.spec.inter_latency_us, 100.0, 1e-9);
  EXPECT_TRUE(contains(error_of([&] { mt::dist::calibrate_network(racks, false, {mt::dist::read_comm_profile(no_gamma)}); }),
                       "--bandwidth-gbps"));

  // The command: at N = 4, T(M) = 600 us + 2.4e-8 M. BSP: 5 ms + T(2000) + 0.5 = 6.148 ms.
  // WFBP: layer b done at 3 ms, its message 3..3.624; layer a done at 5 ms (+ gamma: b's message
  // was sent during backward), its message then 0.624 ms, update 0.5: 6.124 ms, 7.124 with gamma 1 ms.
  const std::vector<std::string> base = {kMlpConfig, "--layer-times", layers, "--workers", "1,4",
                                         "--bandwidth-gbps", "1", "--latency-us", "50"};
  // gamma is a core-sharing term: the model applies it with --shared-cores only.
  auto with = [&](const std::string& profile, bool shared_cores = true) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--comm-profile", profile});
    if (shared_cores) args.push_back("--shared-cores");
    return model_output(args);
  };
  const std::string out0 = with(no_gamma), out1 = with(with_gamma);
  EXPECT_TRUE(contains(table_row(with(with_gamma, false), 4), "6.124 (")) << "gamma off by default";
  EXPECT_TRUE(contains(out0, "efficiency 0.500"));
  EXPECT_TRUE(contains(out0, "100.00 us per hop"));
  EXPECT_TRUE(contains(out1, "gamma 1000.0 us per message"));
  const std::string row0 = table_row(out0, 4), row1 = table_row(out1, 4);
  EXPECT_TRUE(contains(row0, "6.148 (")) << row0;  // BSP
  EXPECT_TRUE(contains(row1, "6.148 (")) << row1;  // BSP never pays gamma
  EXPECT_TRUE(contains(row0, "6.124 (")) << row0;  // WFBP
  EXPECT_TRUE(contains(row1, "7.124 (")) << row1;  // WFBP pays one message's gamma
  EXPECT_FALSE(contains(row1, "6.124 ("));
  // One worker sends nothing: no gamma.
  EXPECT_EQ(table_row(out0, 1), table_row(out1, 1));
  EXPECT_TRUE(contains(out1, "backward 1 > send 0 (CPU) > backward 0"));  // the critical path at N = 4

  // With the share of compute lost while a message flies (0.5), b's message (3..3.624) takes
  // 0.312 ms of a's backward: a ends at 5.312, its message 5.936, update 6.436 ms. gamma no longer
  // enters the DAG.
  const std::string overlap = with(write_comm_profile(dir + "/o.json", 4, 600e-6, 2.4e-8, 0.001, {}, 0.5));
  EXPECT_TRUE(contains(table_row(overlap, 4), "6.436 (")) << overlap;
  EXPECT_TRUE(contains(overlap, "while a message is in flight during backward the compute loses 50.0%")) << overlap;

  // Messages 3 ms slower while the ranks compute: b's message overlaps a's backward (3..5) for
  // all of it up to 5, d = 0.624 + 3 x 2 / d = 2.781 ms; a's message then waits until 5.781.
  const std::string busy = with(write_comm_profile(dir + "/busy.json", 4, 600e-6, 2.4e-8, 0.0, {}, 0,
                                                   R"(, "busy_bytes": [1000, 2000], "busy_seconds": [0.003624, 0.003648])"));
  EXPECT_TRUE(contains(table_row(busy, 4), "6.905 (")) << busy;
  EXPECT_TRUE(contains(busy, "for the share of a message that overlaps backward, the time measured while the ranks "
                             "computed")) << busy;

  // Without --bandwidth-gbps the measured rate is used: at n = world the same predictions.
  const std::string bare = model_output({kMlpConfig, "--layer-times", layers, "--workers", "1,4", "--comm-profile",
                                      with_gamma, "--shared-cores"});
  EXPECT_EQ(table_row(bare, 4), row1);
  EXPECT_TRUE(contains(bare, "the measured ring's rate"));

  // Measured times off the line: at N = 4 the allreduces take them (BSP: 5 + 5 + 0.5 = 10.5 ms;
  // WFBP: b's message 3..6, a's 6..9, update: 9.5 ms), at N = 8 the line still decides.
  const std::string curved = write_comm_profile(dir + "/curve.json", 4, 600e-6, 2.4e-8, 0.0, {0.003, 0.005});
  const mt::dist::MeasuredComm mc = mt::dist::read_comm_profile(curved);
  ASSERT_EQ(mc.cost.measured_bytes, (std::vector<double>{1000, 2000}));  // sorted, one mean per size
  EXPECT_NEAR(mc.cost.measured_seconds[1], 0.005, 1e-12);
  std::vector<std::string> args = base;
  args[4] = "1,4,8";  // --workers
  args.insert(args.end(), {"--comm-profile", curved});
  const std::string out_curve = model_output(args);
  const std::string row_curve = table_row(out_curve, 4);
  EXPECT_TRUE(contains(row_curve, "10.500 (")) << row_curve;
  EXPECT_TRUE(contains(row_curve, "9.500 (")) << row_curve;
  EXPECT_TRUE(contains(out_curve, "an allreduce takes the measured time of its size (2 sizes"));
  args.back() = no_gamma;  // the same line, with the line's times as its curve
  EXPECT_EQ(table_row(model_output(args), 8), table_row(out_curve, 8));
}

TEST(CommProfile, BadProfilesAreErrorsThatSayWhatToDo) {
  const std::string dir = mt::testing::make_temp_dir("mt_comm_profile_bad");
  const std::string layers = write_small_layers(dir);
  auto model_error = [&](const std::string& profile) {
    return error_of([&] {
      std::ostringstream out;
      mt::apps::run_model_command({kMlpConfig, "--layer-times", layers, "--comm-profile", profile}, out);
    });
  };
  const std::string missing = dir + "/nothing.json";
  std::string e = model_error(missing);
  EXPECT_TRUE(contains(e, "cannot read the communication profile \"" + missing + "\""));
  EXPECT_TRUE(contains(e, "profile-comm --out"));

  const std::string corrupt = dir + "/corrupt.json";
  write_file(corrupt, R"({"world": 2, "alpha_s": )");
  e = model_error(corrupt);
  EXPECT_TRUE(contains(e, corrupt + ": invalid JSON"));
  EXPECT_TRUE(contains(e, "profile-comm --out"));

  e = model_error(write_comm_profile(dir + "/one.json", 1, 1e-4, 1e-8, 0));
  EXPECT_TRUE(contains(e, "\"world\" is 1"));
  EXPECT_TRUE(contains(e, "at least 2 ranks"));

  e = model_error(write_comm_profile(dir + "/flat.json", 2, 1e-4, 0, 0));
  EXPECT_TRUE(contains(e, "\"beta_s_per_byte\" must be > 0"));

  e = model_error(write_comm_profile(dir + "/busy.json", 2, 1e-4, 1e-8, 0, {}, 0,
                                     R"(, "busy_bytes": [1000, 3000], "busy_seconds": [0.001, 0.002])"));
  EXPECT_TRUE(contains(e, "\"busy_bytes\" must time the sizes of \"bytes\" again")) << e;
  e = model_error(write_comm_profile(dir + "/slowdown.json", 2, 1e-4, 1e-8, 0, {}, 1.0));
  EXPECT_TRUE(contains(e, "\"overlap_slowdown\" (the share of the compute lost while a message is in flight) must "
                          "be below 1, got 1")) << e;

  const std::string no_gamma = dir + "/no_gamma.json";
  write_file(no_gamma, R"({"world": 2, "alpha_s": 1e-4, "beta_s_per_byte": 1e-8})");
  EXPECT_TRUE(contains(model_error(no_gamma), "missing \"gamma_s\""));

  // The timed allreduces behind the measured curve: as many times as sizes, all > 0.
  const std::string uneven = dir + "/uneven.json";
  write_file(uneven, R"({"world": 2, "alpha_s": 1e-4, "beta_s_per_byte": 1e-8, "gamma_s": 0,
                         "bytes": [1024, 4096], "seconds": [0.001]})");
  EXPECT_TRUE(contains(model_error(uneven), uneven + ": \"bytes\" has 2 entries but \"seconds\" 1"));
  const std::string zero = dir + "/zero.json";
  write_file(zero, R"({"world": 2, "alpha_s": 1e-4, "beta_s_per_byte": 1e-8, "gamma_s": 0,
                       "bytes": [1024, 4096], "seconds": [0.001, 0]})");
  EXPECT_TRUE(contains(model_error(zero), zero + ": \"bytes\" and \"seconds\" must hold numbers > 0 (entry 1)"));
  // The after-idle times: with the idle time they followed, and of the same sizes.
  const std::string no_idle = dir + "/no_idle.json";
  write_file(no_idle, R"({"world": 2, "alpha_s": 1e-4, "beta_s_per_byte": 1e-8, "gamma_s": 0,
                          "bytes": [1024, 4096], "seconds": [0.001, 0.002],
                          "idle_bytes": [1024, 4096], "idle_seconds": [0.001, 0.001]})");
  EXPECT_TRUE(contains(model_error(no_idle), no_idle + ": missing \"idle_before_s\""));
  const std::string other_sizes = dir + "/other_sizes.json";
  write_file(other_sizes, R"({"world": 2, "alpha_s": 1e-4, "beta_s_per_byte": 1e-8, "gamma_s": 0,
                              "bytes": [1024, 4096], "seconds": [0.001, 0.002], "idle_before_s": 0.01,
                              "idle_bytes": [1024, 8192], "idle_seconds": [0.001, 0.001]})");
  e = model_error(other_sizes);
  EXPECT_TRUE(contains(e, other_sizes + ": \"idle_bytes\" must time the sizes of \"bytes\" again")) << e;
  EXPECT_TRUE(contains(e, "the size 8192")) << e;

  // profile-comm itself: a single process, and malformed flags.
  e = profile_comm_error({"--out", dir + "/x.json"});
  EXPECT_TRUE(contains(e, "single process"));
  EXPECT_TRUE(contains(e, "mintrain launch --nproc-per-node 2 -- profile-comm"));
  EXPECT_TRUE(contains(profile_comm_error({"--sizes", "256,256"}), "two different sizes"));
  EXPECT_TRUE(contains(profile_comm_error({"--sizes", "256,x"}), "\"x\""));
  EXPECT_TRUE(contains(profile_comm_error({"--frobnicate"}), "--frobnicate"));
  EXPECT_TRUE(contains(profile_comm_error({"--repeats"}), "--repeats needs a value"));
  EXPECT_TRUE(contains(profile_comm_error({"--seconds-per-size", "-1"}), "--seconds-per-size must be in [0, 600]"));
  EXPECT_TRUE(contains(profile_comm_error({"--idle-ms", "-5"}), "--idle-ms must be in [0, 10000]"));
  EXPECT_TRUE(contains(profile_comm_error({"--idle-ms", "soon"}), "--idle-ms: \"soon\" is not a number"));
  EXPECT_TRUE(contains(profile_comm_error({"--gamma-message-floats", "0"}),
                       "--gamma-message-floats: \"0\" must be an integer >= 1"));
}
