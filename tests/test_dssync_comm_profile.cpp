// DS-Sync's group averages measured as it runs them (dist/dssync_comm_profile.h): every partition
// of its schedule timed with all groups at once on a real Gloo world, the curves the model takes
// from them, the JSON between profile-comm and `mintrain model`, and what a bad file says.
#include <stdlib.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "apps/model_command.h"
#include "apps/profile_comm_command.h"
#include "core/tensor.h"
#include "dist/predict/comm_profile.h"
#include "dist/predict/comm_profile_file.h"
#include "dist/predict/dssync_comm_profile.h"
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

mt::dist::CommProfileOptions quick_options() {
  mt::dist::CommProfileOptions o;
  o.sizes_floats = {4096, 256};  // unsorted on purpose: the patterns' sizes come out ascending
  o.repeats = 2;
  o.seconds_per_size = 0;
  return o;
}

// The same value on every rank (the slowest group's time is shared, not per rank).
void expect_same_on_every_rank(mt::dist::ProcessGroup& group, double value) {
  auto t = mt::core::Tensor::from_vector(std::vector<float>{static_cast<float>(value)}, {1});
  group.allreduce(t)->wait();
  EXPECT_FLOAT_EQ(t.item(), static_cast<float>(value) * static_cast<float>(group.size()));
}

// Two layers of 1000 bytes each (2000 bytes of parameters, no buffers): 2 ms forward, 3 ms
// backward, 0.5 ms update, so DS-Sync = 5.5 ms + the group average.
std::string write_layers(const std::string& dir) {
  const std::string path = dir + "/layers.json";
  write_file(path, R"({"model": "hand", "batch_size": 32, "update_seconds": 0.0005,
    "buffer_bytes": 0, "compress_seconds": 0.0002, "decode_seconds": 0.0001,
    "layers": [{"name": "a", "forward": 0.001, "backward": 0.002, "bytes": 1000},
               {"name": "b", "forward": 0.001, "backward": 0.001, "bytes": 1000}]})");
  return path;
}

// A profile of 4 ranks (ring: 1 ms + 1e-6 s/B) with DS-Sync's groups of 2: inside racks 4 ms at
// 1000 B and 10 ms at 4000 B (two partitions, averaged), crossing 20 and 50 ms.
// `in_step`: the fields of a profile timed in step, before "patterns".
std::string write_profile(const std::string& path, int ranks_per_rack, const std::string& patterns = "",
                          const std::string& in_step = "") {
  std::ostringstream os;
  os << R"({"world": 4, "alpha_s": 0.001, "beta_s_per_byte": 1e-6, "gamma_s": 0,
            "bytes": [1000, 4000], "seconds": [0.002, 0.005],
            "dssync": {"group_size": 2, "ranks_per_rack": )"
     << ranks_per_rack << ", " << in_step << R"("patterns": )"
     << (patterns.empty() ? R"([
              {"partition": "{0,1}{2,3}", "crosses_racks": false, "bytes": [1000, 4000], "seconds": [0.003, 0.009]},
              {"partition": "{0,3}{1,2}", "crosses_racks": false, "bytes": [4000, 1000], "seconds": [0.011, 0.005]},
              {"partition": "{0,2}{1,3}", "crosses_racks": true, "bytes": [1000, 4000], "seconds": [0.02, 0.05]}])"
                          : patterns)
     << "}}";
  write_file(path, os.str());
  return path;
}

// The DS-Sync column (the last one) of N's row in the prediction table, in milliseconds.
double dssync_ms(const std::string& out, int workers) {
  std::istringstream in(out.substr(out.find("milliseconds per iteration")));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int n = 0;
    if (!(fields >> n) || n != workers || line.find('%') == std::string::npos) continue;
    std::vector<double> ms;
    std::string word;
    while (fields >> word)
      if (word[0] != '(' && word.back() != ')' && word.back() != '%') ms.push_back(std::stod(word));
    return ms.empty() ? -1 : ms.back();
  }
  return -1;
}

}  // namespace

// 4 ranks in racks of 2, groups of 2: the in-rack partition {0,1}{2,3} and the two crossing
// ones, each timed with all its groups at once.
TEST(DsSyncCommProfile, TimesEveryPartitionOfTheScheduleWithAllGroupsAtOnce) {
  EXPECT_TRUE(mt::testing::run_ranks(4, [&](mt::testing::RankContext& c) {
    const mt::dist::DsSyncCommProfile p =
        mt::dist::profile_dssync_groups(*c.group, mt::core::Device::cpu(), 2, 2, quick_options());
    EXPECT_EQ(p.group_size, 2);
    EXPECT_EQ(p.ranks_per_rack, 2);
    // In rack {0,1}{2,3}; crossing one rank per rack at a time (dist.dssync.cross_ranks_per_rack's
    // default), each pair in turn: {0,2}{1}{3} and {0}{1,3}{2}.
    ASSERT_EQ(p.patterns.size(), 3u);
    int crossing = 0;
    for (const auto& g : p.patterns) {
      const std::string s = mt::dist::partition_str(g.partition);
      EXPECT_EQ(g.crosses_racks, s != "{0,1}{2,3}") << s;
      EXPECT_TRUE(s == "{0,1}{2,3}" || s == "{0,2}{1}{3}" || s == "{0}{1,3}{2}") << s;
      crossing += g.crosses_racks;
      ASSERT_EQ(g.size_bytes, (std::vector<double>{1024, 16384}));
      ASSERT_EQ(g.size_seconds.size(), 2u);
      for (double t : g.size_seconds) {
        EXPECT_GT(t, 0.0);
        EXPECT_LT(t, 30.0);
        expect_same_on_every_rank(*c.group, t);
      }
    }
    EXPECT_EQ(crossing, 2);
  }).ok_or_report());
}

// 3 ranks, groups of 2: the folded butterfly leaves one rank alone in each partition; it times
// nothing but still takes part in every agreement, so nobody waits for it forever.
TEST(DsSyncCommProfile, ARankAloneInAPartitionTakesPartWithoutTiming) {
  EXPECT_TRUE(mt::testing::run_ranks(3, [&](mt::testing::RankContext& c) {
    mt::dist::CommProfileOptions o = quick_options();
    o.seconds_per_size = 0.02;  // the count of repeats is agreed too
    o.max_repeats = 5;
    const mt::dist::DsSyncCommProfile p = mt::dist::profile_dssync_groups(*c.group, mt::core::Device::cpu(), 2, 0, o);
    ASSERT_EQ(p.patterns.size(), 2u);
    for (const auto& g : p.patterns) {
      EXPECT_FALSE(g.crosses_racks);  // one rack
      EXPECT_EQ(g.partition.size(), 2u);  // a pair and a rank alone
      for (double t : g.size_seconds) {
        EXPECT_GT(t, 0.0);
        expect_same_on_every_rank(*c.group, t);
      }
    }
  }).ok_or_report());
}

// In step: iterations of compute then the group average, no barrier. With rank 3 computing 25 ms
// and the others 2, the butterfly pairs everyone with rank 3 within two iterations, so every
// iteration takes about 25 ms and beyond the mean compute alone ((3 x 2 + 25) / 4 = 7.75 ms)
// about 17 ms; with everyone at 2 ms, about the pair average alone. Timed together after a
// barrier, both would be the pair average alone: the wait for the later partner is what the
// in-step profile is for.
TEST(DsSyncCommProfile, InStepCountsTheWaitForALaterPartner) {
  auto profile = [](mt::testing::RankContext& c, int slow_ms) {
    mt::dist::CommProfileOptions o = quick_options();
    o.sizes_floats = {256};
    o.repeats = 4;
    o.dssync_compute_seconds = 0.002;
    // More cycles until 0.3 s, at most 8: rank 0's count (rank 3 alone would want fewer, and
    // a count that differed between ranks would leave its partners waiting until the timeout).
    o.seconds_per_size = 0.3;
    o.max_repeats = 8;
    const int my_ms = c.rank == 3 ? slow_ms : 2;
    return mt::dist::profile_dssync_groups(*c.group, mt::core::Device::cpu(), 2, 0, o, [my_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(my_ms));
    });
  };
  EXPECT_TRUE(mt::testing::run_ranks(4, [&](mt::testing::RankContext& c) {
    const mt::dist::DsSyncCommProfile even = profile(c, 2);
    const mt::dist::DsSyncCommProfile uneven = profile(c, 25);
    EXPECT_DOUBLE_EQ(uneven.compute_seconds, 0.002);
    EXPECT_GT(uneven.compute_alone_seconds, 0.007);
    EXPECT_LT(uneven.compute_alone_seconds, 0.030);
    ASSERT_EQ(uneven.patterns.size(), 2u);
    ASSERT_EQ(even.patterns.size(), 2u);
    for (size_t p = 0; p < 2; ++p) {
      ASSERT_EQ(uneven.patterns[p].size_seconds.size(), 1u);
      const double waited = uneven.patterns[p].size_seconds[0], in_step = even.patterns[p].size_seconds[0];
      EXPECT_GT(waited, in_step + 0.008) << mt::dist::partition_str(uneven.patterns[p].partition);
      EXPECT_GT(in_step, 0.0);
      expect_same_on_every_rank(*c.group, waited);
    }
    const std::string json = mt::dist::dssync_comm_profile_json(uneven, "");
    EXPECT_TRUE(contains(json, "\"ranks_per_rack\": 0, \"compute_s\": 0.002, \"compute_alone_s\": ")) << json;
  }).ok_or_report());
}

TEST(DsSyncCommProfile, CurvesAverageThePartitionsOfEachKind) {
  mt::dist::DsSyncCommProfile p;
  p.group_size = 2;
  p.patterns.push_back({{{0, 1}, {2, 3}}, false, {1000, 4000}, {0.003, 0.009}});
  p.patterns.push_back({{{0, 3}, {1, 2}}, false, {1000, 4000}, {0.005, 0.011}});
  p.patterns.push_back({{{0, 2}, {1, 3}}, true, {1000, 4000}, {0.02, 0.05}});
  std::vector<double> bytes, seconds;
  ASSERT_TRUE(mt::dist::dssync_pattern_curve(p, false, bytes, seconds));
  EXPECT_EQ(bytes, (std::vector<double>{1000, 4000}));
  EXPECT_NEAR(seconds[0], 0.004, 1e-15);
  EXPECT_NEAR(seconds[1], 0.010, 1e-15);
  ASSERT_TRUE(mt::dist::dssync_pattern_curve(p, true, bytes, seconds));
  EXPECT_EQ(seconds, (std::vector<double>{0.02, 0.05}));
  p.patterns.pop_back();
  EXPECT_FALSE(mt::dist::dssync_pattern_curve(p, true, bytes, seconds));
  EXPECT_TRUE(bytes.empty());
  // The JSON profile-comm writes, read back by the model.
  const std::string json = mt::dist::dssync_comm_profile_json(p, "");
  EXPECT_TRUE(contains(json, "{\"group_size\": 2, \"ranks_per_rack\": 0, \"patterns\": ["));
  EXPECT_TRUE(contains(json, "{\"partition\": \"{0,3}{1,2}\", \"crosses_racks\": false, \"bytes\": [1000, 4000], "
                             "\"seconds\": [0.005, 0.011]}"));
}

// At N = the profiled world, with the profile's group size and racks, a group average costs the
// measured time of the model's size (2000 B): inside racks 4 + (10 - 4) / 3 = 6 ms, crossing
// 20 + 30 / 3 = 30 ms. Anything else falls back to the network model, and says so.
TEST(DsSyncCommProfile, ModelUsesTheMeasuredGroupTimesWhereTheyApply) {
  const std::string dir = mt::testing::make_temp_dir("mt_dssync_comm_profile");
  const std::string layers = write_layers(dir);
  const std::string flat = write_profile(dir + "/flat.json", 0);
  const std::vector<std::string> base = {kMlpConfig, "--layer-times", layers, "--workers", "1,4,8",
                                         "--set", "dist.dssync.group_size=2"};
  auto model = [&](const std::string& profile, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--comm-profile", profile});
    return model_output(args);
  };
  const std::string out = model(flat);
  EXPECT_NEAR(dssync_ms(out, 4), 5.5 + 6.0, 1e-3) << out;
  EXPECT_TRUE(contains(out, "comm profile, DS-Sync: 3 partitions timed with all groups at once (groups of 2)"));
  EXPECT_TRUE(contains(out, "at N = 4 a group average takes their measured time"));
  // Timed in step: the same curves, and the model says how they were taken.
  const std::string in_step_out =
      model(write_profile(dir + "/in_step.json", 0, "", R"("compute_s": 0.0055, "compute_alone_s": 0.006, )"));
  EXPECT_NEAR(dssync_ms(in_step_out, 4), 5.5 + 6.0, 1e-3) << in_step_out;
  EXPECT_TRUE(contains(in_step_out, "3 partitions timed in step after 5.500 ms of compute each, beyond it (groups of 2)"))
      << in_step_out;

  // At N = 8 and with other groups: the model's own estimate, the same as without the patterns.
  const std::string plain = write_profile(dir + "/plain.json", 0, R"([
      {"partition": "", "crosses_racks": true, "bytes": [1000, 4000], "seconds": [1, 2]}])");
  EXPECT_NE(dssync_ms(model(plain), 4), dssync_ms(out, 4));
  EXPECT_NEAR(dssync_ms(model(plain), 8), dssync_ms(out, 8), 1e-9);
  const std::string groups4 = model(flat, {"--set", "dist.dssync.group_size=4"});
  EXPECT_TRUE(contains(groups4, "not used, the model's DS-Sync has groups of 4, one rack"));
  EXPECT_NEAR(dssync_ms(groups4, 4), dssync_ms(model(plain, {"--set", "dist.dssync.group_size=4"}), 4), 1e-9);

  // Two racks of 2, crossing every 2nd iteration: (6 + 30) / 2 = 18 ms of averaging.
  const std::vector<std::string> racks = {"--set", "dist.dssync.ranks_per_rack=2", "--set",
                                          "dist.dssync.cross_period=2", "--bandwidth-gbps", "1",
                                          "--ranks-per-rack", "2", "--inter-bandwidth-gbps", "0.1"};
  const std::string two_racks = model(write_profile(dir + "/racks.json", 2), racks);
  EXPECT_NEAR(dssync_ms(two_racks, 4), 5.5 + 18.0, 1e-3) << two_racks;
  // A profile without racks does not describe a network with them.
  EXPECT_TRUE(contains(model(flat, racks), "not used, the model's DS-Sync has groups of 2, racks of 2"));
}

TEST(DsSyncCommProfile, BadGroupProfilesAreErrorsThatNameTheEntry) {
  const std::string dir = mt::testing::make_temp_dir("mt_dssync_comm_profile_bad");
  auto read_error = [&](const std::string& name, const std::string& patterns, int ranks_per_rack = 0) {
    const std::string path = write_profile(dir + "/" + name, ranks_per_rack, patterns);
    return error_of([&] { mt::dist::read_comm_profile(path); });
  };
  std::string e = read_error("uneven.json", R"([{"crosses_racks": false, "bytes": [1000, 4000], "seconds": [0.1]}])");
  EXPECT_TRUE(contains(e, "\"dssync\".patterns[0]: \"bytes\" and \"seconds\" must be arrays of the same")) << e;
  EXPECT_TRUE(contains(e, "profile-comm --out"));
  e = read_error("nobool.json", R"([{"crosses_racks": 1, "bytes": [1000], "seconds": [0.1]}])");
  EXPECT_TRUE(contains(e, "\"crosses_racks\" must be true or false")) << e;
  e = read_error("zero.json", R"([{"crosses_racks": true, "bytes": [1000, 4000], "seconds": [0.1, 0]}])");
  EXPECT_TRUE(contains(e, "must hold numbers > 0 (entry 1)")) << e;
  e = read_error("twice.json", R"([{"crosses_racks": true, "bytes": [1000, 1000], "seconds": [0.1, 0.2]}])");
  EXPECT_TRUE(contains(e, "has the size 1000 twice")) << e;
  e = read_error("empty.json", "[]");
  EXPECT_TRUE(contains(e, "\"patterns\" must be a non-empty array")) << e;
  const std::string one = dir + "/group1.json";
  write_file(one, R"({"world": 4, "alpha_s": 0.001, "beta_s_per_byte": 1e-6, "gamma_s": 0,
                      "dssync": {"group_size": 1, "ranks_per_rack": 0, "patterns": []}})");
  EXPECT_TRUE(contains(error_of([&] { mt::dist::read_comm_profile(one); }), "\"group_size\" must be an integer >= 2"));

  // profile-comm's flags.
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-ranks-per-rack", "2"}), "give --dssync-group-size too"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-group-size", "1"}), "--dssync-group-size: \"1\" must be an integer >= 2"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-sizes", "5"}), "two different sizes"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-repeats", "8"}), "give --dssync-group-size too"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-compute-ms", "8"}), "give --dssync-group-size too"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-group-size", "2", "--dssync-compute-ms", "0"}),
                       "--dssync-compute-ms must be in (0, 10000], got 0"));
  EXPECT_TRUE(contains(profile_comm_error({"--dssync-group-size", "2", "--dssync-repeats", "0"}),
                       "--dssync-repeats: \"0\" must be an integer >= 1"));
}
