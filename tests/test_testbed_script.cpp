// apps/scripts/netns_testbed.sh: the emulated-network testbed. Everywhere: its dry-run uses only
// 10.77.0.x addresses and our own namespaces, the straggler and contention presets shape the
// links they should at the rates they should, and bad arguments are refused. As root with working
// network namespaces: `down` is safe when nothing exists, and a real 2-host testbed comes up,
// the hosts reach each other, `drops` counts what a flooded link dropped, and `down` leaves
// nothing behind. The tests use their own prefix (mt-test), so they never touch a testbed of a
// benchmark running at the same time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/test_helpers.h"

namespace {

const std::string kScript = std::string(MT_SOURCE_DIR) + "/apps/scripts/netns_testbed.sh";

using Result = mt::testing::CommandResult;

// ctest runs these tests in parallel: a test that brings a testbed up and one that tears down
// must not share a prefix, or the teardown removes the other's namespaces mid-test.
Result sh(const std::string& cmd, const std::string& prefix = "mt-test") {
  return mt::testing::run_command("MT_TESTBED_PREFIX=" + prefix + " " + cmd);
}

Result testbed(const std::string& args, const std::string& prefix = "mt-test") {
  return sh("bash " + kScript + " " + args, prefix);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool netns_usable() {
  return ::geteuid() == 0 && sh("ip netns list >/dev/null").rc == 0;
}

TEST(TestbedScript, DryRunUsesOnlyItsOwnAddressesAndNamespaces) {
  const Result r = testbed("dry-run 4 two_racks 25mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::regex ip(R"((\d+)\.(\d+)\.(\d+)\.(\d+))");
  int addresses = 0;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), ip); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ(it->str().rfind("10.77.0.", 0), 0u) << "address outside 10.77.0.0/24: " << it->str();
    ++addresses;
  }
  EXPECT_EQ(addresses, 4);  // one per host
  std::istringstream lines(r.out);
  std::string line;
  int shaped = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    // Every command runs in (or creates/deletes) one of our namespaces: nothing in the root one.
    EXPECT_TRUE(std::regex_search(line, std::regex(R"(^ip netns (add|del|exec) mt-test-(sw|h\d+)\b)")))
        << line;
    shaped += line.find("tbf rate") != std::string::npos;
  }
  EXPECT_EQ(shaped, 2 * 4 + 2);  // both directions of 4 host links and of the inter-rack link
  EXPECT_NE(r.out.find("tbf rate 25mbit"), std::string::npos);
  // Host links queue 100 ms; the link between the racks, which DS-Sync's groups all cross at
  // once, a second (a switch with a deep buffer: no loss stalls the model knows nothing of).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(dev eth0 root handle 1: tbf rate 25mbit burst \d+ latency 100ms)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(dev up0 root handle 1: tbf rate \d+bit burst \d+ latency 1s)")))
      << r.out;
  EXPECT_NE(r.out.find("ip netns del mt-test-sw"), std::string::npos);
}

// Lines of a dry-run that shape with tbf, as (interface spec, rate) pairs, in order.
std::vector<std::pair<std::string, std::string>> tbf_lines(const std::string& out) {
  std::vector<std::pair<std::string, std::string>> lines;
  const std::regex tbf(R"(^ip netns exec (mt-test-\w+) tc qdisc replace dev (\w+) root handle 1: tbf rate (\w+) )");
  std::istringstream in(out);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, tbf)) lines.emplace_back(m[1].str() + "/" + m[2].str(), m[3].str());
  }
  return lines;
}

TEST(TestbedScript, StragglerSlowsOnlyTheLastHostsLinkToATenth) {
  const Result r = testbed("dry-run 4 straggler 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto lines = tbf_lines(r.out);
  ASSERT_EQ(lines.size(), 8u) << r.out;  // both directions of 4 host links, no inter-rack link
  for (const auto& [dev, rate] : lines) {
    const bool last_host = dev == "mt-test-h3/eth0" || dev == "mt-test-sw/p3";
    EXPECT_EQ(rate, last_host ? "10000000bit" : "100mbit") << dev;
  }
}

TEST(TestbedScript, ContentionVariesHostZerosLinkBetweenAFifthAndTheFullRate) {
  const Result r = testbed("dry-run 4 contention 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto lines = tbf_lines(r.out);
  // 8 from `up` (flat, all at the rate), then one round of `vary`: host 0's link both ways at
  // RATE/5, then back at RATE.
  ASSERT_EQ(lines.size(), 12u) << r.out;
  for (size_t k = 0; k < 8; ++k) EXPECT_EQ(lines[k].second, "100mbit") << lines[k].first;
  const std::vector<std::pair<std::string, std::string>> round = {
      {"mt-test-h0/eth0", "20000000bit"}, {"mt-test-sw/p0", "20000000bit"},
      {"mt-test-h0/eth0", "100mbit"}, {"mt-test-sw/p0", "100mbit"}};
  for (size_t k = 0; k < round.size(); ++k) EXPECT_EQ(lines[8 + k], round[k]);
  EXPECT_NE(r.out.find("# vary 0 20000000bit 100mbit 2"), std::string::npos) << r.out;
}

// HOST_CPUS: every host gets a cgroup with a quota of that many cores (10 ms periods), `down`
// removes them, and nothing outside our own hosts' cgroups is touched.
TEST(TestbedScript, HostCpusGivesEveryHostAQuotaOfItsOwn) {
  const Result r = sh("HOST_CPUS=0.5 bash " + kScript + " dry-run 2 flat 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  if (contains(r.out, "no cpu cgroup to write")) GTEST_SKIP() << "this machine has no cpu cgroup: " << r.out;
  const bool v1 = contains(r.out, "cpu.cfs_quota_us");
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("ip netns ", 0) == 0) continue;
    // The rest are cgroup commands, each on one of our hosts' cgroups (v2 may enable the cpu
    // controller for the children of the root first).
    EXPECT_TRUE(std::regex_search(line, std::regex(R"(/sys/fs/cgroup/(cpu/)?mt-test-h[01]\b)")) ||
                line == "echo +cpu > /sys/fs/cgroup/cgroup.subtree_control")
        << line;
  }
  for (const std::string h : {"mt-test-h0", "mt-test-h1"}) {
    const std::string dir = std::string(v1 ? "/sys/fs/cgroup/cpu/" : "/sys/fs/cgroup/") + h;
    EXPECT_TRUE(contains(r.out, "mkdir -p " + dir + "\n")) << r.out;
    if (v1) {
      EXPECT_TRUE(contains(r.out, "echo 10000 > " + dir + "/cpu.cfs_period_us\n")) << r.out;
      EXPECT_TRUE(contains(r.out, "echo 5000 > " + dir + "/cpu.cfs_quota_us\n")) << r.out;
    } else {
      EXPECT_TRUE(contains(r.out, "echo 5000 10000 > " + dir + "/cpu.max\n")) << r.out;
    }
    EXPECT_TRUE(contains(r.out, "rmdir " + dir + "\n")) << r.out;
  }
  // Without HOST_CPUS no cgroup is made.
  EXPECT_FALSE(contains(testbed("dry-run 2 flat 100mbit 0ms").out, "cgroup"));
}

// HOST_QUEUE bounds only the hosts' own sides of their links (bytes or a time); the switch's
// ports keep their 100 ms. A bad value is refused before anything is built.
TEST(TestbedScript, HostQueueBoundsOnlyTheHostsSide) {
  const Result r = sh("HOST_QUEUE=1514000b bash " + kScript + " dry-run 2 two_paths 25mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const std::string h : {"mt-test-h0", "mt-test-h1"})
    for (const std::string dev : {"eth0", "eth1"})
      EXPECT_TRUE(contains(r.out, "ip netns exec " + h + " tc qdisc replace dev " + dev +
                                      " root handle 1: tbf rate 25mbit burst 31250 limit 1514000\n"))
          << h << " " << dev << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "ip netns exec mt-test-sw tc qdisc replace dev p0 root handle 1: tbf rate 25mbit burst 31250 latency 100ms"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "mt-test-sw tc qdisc replace dev p0 root handle 1: tbf rate 25mbit burst 31250 limit"));
  const Result timed = sh("HOST_QUEUE=1s bash " + kScript + " dry-run 2 flat 25mbit 0ms");
  EXPECT_TRUE(contains(timed.out, "mt-test-h0 tc qdisc replace dev eth0 root handle 1: tbf rate 25mbit burst 31250 latency 1s"))
      << timed.out;
  const Result bad = sh("HOST_QUEUE=lots bash " + kScript + " dry-run 2 flat 25mbit 0ms");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_TRUE(contains(bad.out, "HOST_QUEUE must be a time (100ms, 1s) or bytes (1514000b) (got 'lots')")) << bad.out;
  EXPECT_FALSE(contains(bad.out, "ip netns add"));
}

// two_paths: every host has a second link (eth1, 10.77.1.x) into a second pair of racks, joined
// by their own inter-rack link; nothing outside 10.77.0.0/24 and 10.77.1.0/24.
TEST(TestbedScript, TwoPathsGivesEveryHostASecondPlane) {
  const Result r = testbed("dry-run 4 two_paths 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::regex ip(R"((\d+)\.(\d+)\.(\d+)\.(\d+))");
  std::vector<std::string> addresses;
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), ip); it != std::sregex_iterator(); ++it)
    addresses.push_back(it->str());
  EXPECT_EQ(addresses, (std::vector<std::string>{"10.77.0.1", "10.77.1.1", "10.77.0.2", "10.77.1.2", "10.77.0.3",
                                                 "10.77.1.3", "10.77.0.4", "10.77.1.4"}));
  const auto lines = tbf_lines(r.out);
  EXPECT_EQ(lines.size(), 4u + 4 * 4u) << r.out;  // two inter-rack links both ways, 2 links per host both ways
  for (const std::string link : {"up0", "up1", "upb0", "upb1"})
    EXPECT_TRUE(contains(r.out, "mt-test-sw tc qdisc replace dev " + link + " root handle 1: tbf rate 25000000bit")) << link;
  EXPECT_TRUE(contains(r.out, "ip link set q0 master rack0b up")) << r.out;
  EXPECT_TRUE(contains(r.out, "ip link set q3 master rack1b up")) << r.out;
  EXPECT_FALSE(contains(r.out, " htb ")) << "no priority queues unless PRIO_QUEUES=1";
}

// PRIO_QUEUES=1: the switch's side of every link gets 4 bands at its rate (htb), served in
// priority order, DSCP CS4..CS1 by u32 filters, the lowest band with the shortest queue; hosts'
// own sides stay plain tbf.
TEST(TestbedScript, PrioQueuesKeyTheSwitchPortsByDscp) {
  const Result r = sh("PRIO_QUEUES=1 BAND_LIMITS='800 400 100 20' bash " + kScript + " dry-run 2 flat 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const std::string port : {"p0", "p1"}) {
    const std::string at = "ip netns exec mt-test-sw tc ";
    EXPECT_TRUE(contains(r.out, at + "qdisc replace dev " + port + " root handle 1: htb default 13\n")) << r.out;
    EXPECT_TRUE(contains(r.out, at + "class replace dev " + port + " parent 1: classid 1:1 htb rate 100mbit ceil 100mbit"));
    EXPECT_TRUE(contains(r.out, at + "class replace dev " + port + " parent 1:1 classid 1:11 htb rate 1000000bit quantum 1514 "
                                     "ceil 100mbit burst 125000 prio 0\n")) << r.out;
    EXPECT_TRUE(contains(r.out, at + "class replace dev " + port + " parent 1:1 classid 1:14 htb rate 1000000bit quantum 1514 "
                                     "ceil 100mbit burst 125000 prio 3\n")) << r.out;
    EXPECT_TRUE(contains(r.out, at + "qdisc replace dev " + port + " parent 1:11 handle 11: pfifo limit 800\n"));
    EXPECT_TRUE(contains(r.out, at + "qdisc replace dev " + port + " parent 1:14 handle 14: pfifo limit 20\n"));
    EXPECT_TRUE(contains(r.out, at + "filter replace dev " + port +
                                    " parent 1: protocol ip prio 1 u32 match ip dsfield 0x80 0xfc flowid 1:11\n"));
    EXPECT_TRUE(contains(r.out, at + "filter replace dev " + port +
                                    " parent 1: protocol ip prio 4 u32 match ip dsfield 0x20 0xfc flowid 1:14\n"));
    EXPECT_FALSE(contains(r.out, "dev " + port + " root handle 1: tbf")) << r.out;
  }
  EXPECT_TRUE(contains(r.out, "mt-test-h0 tc qdisc replace dev eth0 root handle 1: tbf rate 100mbit")) << r.out;
  const Result bad = sh("PRIO_QUEUES=1 BAND_LIMITS='lots' bash " + kScript + " dry-run 2 flat");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_TRUE(contains(bad.out, "BAND_LIMITS must be 4 packet counts")) << bad.out;
}

// Cross traffic: one round from host 0 to host 3, with iperf3 or our own dd into a UDP socket
// towards an address that only host 3's frames answer to (inside 10.77.0.0/24).
TEST(TestbedScript, CrossTrafficFloodsOneHostFromAnother) {
  const Result r = sh("CROSS='0 3' bash " + kScript + " dry-run 4 flat 100mbit 0ms");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "# cross 0 3 1 3")) << r.out;
  if (contains(r.out, "iperf3")) {
    EXPECT_TRUE(contains(r.out, "ip netns exec mt-test-h3 iperf3 -s")) << r.out;
    EXPECT_TRUE(contains(r.out, "ip netns exec mt-test-h0 iperf3 -c 10.77.0.4 -u")) << r.out;
  } else {
    EXPECT_TRUE(contains(r.out, "ip netns exec mt-test-h0 ip neigh replace 10.77.0.250 lladdr")) << r.out;
    EXPECT_TRUE(contains(r.out, "ip netns exec mt-test-h0 timeout 1 bash -c exec dd if=/dev/zero bs=1400")) << r.out;
  }
  EXPECT_EQ(testbed("cross 0 0").rc, 2);
  EXPECT_EQ(testbed("cross 0 1 soon").rc, 2);
}

TEST(TestbedScript, VaryRefusesBadArguments) {
  EXPECT_EQ(testbed("vary x 10mbit 20mbit").rc, 2);
  EXPECT_EQ(testbed("vary 0 10mbit 20mbit soon").rc, 2);
  EXPECT_EQ(testbed("vary 0 10furlongs 20mbit").rc, 2);
}

TEST(TestbedScript, RefusesBadArguments) {
  EXPECT_EQ(testbed("dry-run 0 flat").rc, 2);
  EXPECT_EQ(testbed("dry-run 2 mesh").rc, 2);
  EXPECT_EQ(testbed("dry-run 2 flat 10furlongs").rc, 2);
  EXPECT_EQ(testbed("frobnicate").rc, 2);
  for (const char* cpus : {"lots", "0", "-1", "1.5.2"}) {
    const Result r = sh(std::string("HOST_CPUS=") + cpus + " bash " + kScript + " dry-run 2 flat");
    EXPECT_EQ(r.rc, 2) << cpus;
    EXPECT_TRUE(contains(r.out, "HOST_CPUS must be a number of cores > 0")) << r.out;
  }
}

TEST(TestbedScript, SaysWhenNotRoot) {
  if (::geteuid() == 0) {
    if (sh("command -v setpriv >/dev/null").rc != 0) GTEST_SKIP() << "no setpriv to drop root";
    const Result r = sh("setpriv --reuid=65534 --regid=65534 --clear-groups bash " + kScript + " down");
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("must run as root"), std::string::npos) << r.out;
  } else {
    const Result r = testbed("down");
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("must run as root"), std::string::npos) << r.out;
  }
}

// dist/predict/report.sh builds the testbed too: without root it must say so before touching anything.
TEST(TestbedScript, ReportSaysWhenNotRoot) {
  const std::string report = std::string(MT_SOURCE_DIR) + "/dist/predict/report.sh --out /tmp/mt-test-report";
  Result r;
  if (::geteuid() == 0) {
    if (sh("command -v setpriv >/dev/null").rc != 0) GTEST_SKIP() << "no setpriv to drop root";
    r = sh("setpriv --reuid=65534 --regid=65534 --clear-groups bash " + report);
  } else {
    r = sh("bash " + report);
  }
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("must run as root"), std::string::npos) << r.out;
}

// report.sh's own values are checked before it builds a testbed or empties --out.
TEST(TestbedScript, ReportRejectsABadMaxSteal) {
  if (::geteuid() != 0) GTEST_SKIP() << "report.sh checks root first";
  if (sh("command -v gnuplot >/dev/null").rc != 0) GTEST_SKIP() << "report.sh checks gnuplot first";
  const std::string report = std::string(MT_SOURCE_DIR) + "/dist/predict/report.sh --bin /bin/true --out /tmp/mt-test-report";
  for (const std::string bad : {"lots", "-1", ""}) {
    const Result r = sh("bash " + report + " --max-steal '" + bad + "'");
    EXPECT_EQ(r.rc, bad.empty() ? 1 : 2) << r.out;  // 1: bash's own ${2:?} check
    EXPECT_NE(r.out.find(bad.empty() ? "--max-steal needs a percentage" : "--max-steal must be a percentage"),
              std::string::npos) << r.out;
  }
  EXPECT_NE(sh("test -e /tmp/mt-test-report").rc, 0);
}

// dist/predict/survey.sh checks every argument before it needs root, a binary or a testbed: a bad
// one is exit 2 with a message that names it, and --out is never created.
TEST(TestbedScript, SurveyRefusesBadArguments) {
  const std::string survey = "bash " + std::string(MT_SOURCE_DIR) + "/dist/predict/survey.sh --out /tmp/mt-test-survey";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--models resnet18", "unknown model 'resnet18'"},
      {"--networks mesh:100mbit", "unknown network preset 'mesh'"},
      {"--networks flat", "is not PRESET:RATE"},
      {"--networks flat:100furlongs", "bad rate '100furlongs'"},
      {"--networks two_racks:100mbit --workers 5", "two_racks needs an even number of workers"},
      {"--workers 1", "--workers takes numbers >= 2"},
      {"--methods ssgd_fusion", "unknown method 'ssgd_fusion'"},
      {"--batch 0", "--batch must be a number >= 1"},
      {"--frobnicate", "unknown option '--frobnicate'"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = sh(survey + " " + args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.out;
    EXPECT_TRUE(contains(r.out, message)) << args << ": " << r.out;
  }
  // An odd worker count is fine on the flat network alone (it fails later, at the binary).
  const Result flat = sh(survey + " --networks flat:100mbit --workers 3 --bin /nonexistent");
  EXPECT_FALSE(contains(flat.out, "even number")) << flat.out;
  if (sh("command -v gnuplot >/dev/null").rc == 0) {  // gnuplot is checked before PyTorch
    const Result r = sh("PYTHON=/bin/false " + survey);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "cannot import torch")) << r.out;
  } else {
    const Result r = sh(survey);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "gnuplot not found")) << r.out;
  }
  EXPECT_NE(sh("test -e /tmp/mt-test-survey").rc, 0);
}

// report.sh's job and its PyTorch DDP row are checked before it builds a testbed or empties --out.
TEST(TestbedScript, ReportRefusesABadConfigOrPeer) {
  if (::geteuid() != 0) GTEST_SKIP() << "report.sh checks root first";
  if (sh("command -v gnuplot >/dev/null").rc != 0) GTEST_SKIP() << "report.sh checks gnuplot first";
  const std::string report = "bash " + std::string(MT_SOURCE_DIR) + "/dist/predict/report.sh --bin /bin/true --out /tmp/mt-test-report";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--config /nonexistent.prototxt", "no config file"},
      {"--algorithms frobnicate", "unknown algorithm 'frobnicate'"},
      // The peer trains synthetic 3x32x32 images: ResNet-20 on Fashion-MNIST would not be the same case.
      {"--model resnet20 --algorithms pytorch_ddp", "use --config configs/survey_resnet20_synthetic.prototxt"},
      {"--config configs/survey_resnet20_synthetic.prototxt --model resnet21 --algorithms pytorch_ddp",
       "pytorch_ddp has no model 'resnet21'"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = sh(report + " " + args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.out;
    EXPECT_TRUE(contains(r.out, message)) << args << ": " << r.out;
  }
  const Result r = sh("PYTHON=/bin/false " + report + " --config configs/survey_resnet20_synthetic.prototxt --algorithms pytorch_ddp");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "cannot import torch")) << r.out;
  EXPECT_NE(sh("test -e /tmp/mt-test-report").rc, 0);
}

TEST(TestbedScript, DownIsSafeWhenNothingExists) {
  if (!netns_usable()) GTEST_SKIP() << "needs root and ip netns";
  const Result a = testbed("down", "mt-tdown"), b = testbed("down", "mt-tdown");
  EXPECT_EQ(a.rc, 0) << a.out;
  EXPECT_EQ(b.rc, 0) << b.out;
}

TEST(TestbedScript, TwoHostsReachEachOtherAndDownRemovesEverything) {
  if (!netns_usable()) GTEST_SKIP() << "needs root and ip netns";
  const Result up = testbed("up 2 flat 100mbit");
  if (up.rc != 0) {
    testbed("down");
    FAIL() << up.out;
  }
  // No ping on the machine: a TCP connect to a closed port answered by "refused" proves the
  // packet reached the other host and the reset came back (unreachable would time out).
  const Result reach = testbed("run 0 -- timeout 10 bash -c 'exec 3<>/dev/tcp/10.77.0.2/9'");
  const Result lo = testbed("run 1 -- ip link show lo");
  const Result qdisc = testbed("run 1 -- tc qdisc show dev eth0");
  const Result down = testbed("down");
  EXPECT_NE(reach.out.find("refused"), std::string::npos) << reach.out;
  EXPECT_NE(lo.out.find(",UP"), std::string::npos) << lo.out;  // loopback is up in each host
  EXPECT_NE(qdisc.out.find("tbf"), std::string::npos) << qdisc.out;
  EXPECT_EQ(down.rc, 0) << down.out;
  EXPECT_EQ(sh("ip netns list | grep mt-test-").out, "");
}

// `drops` counts what the shaped links dropped: nothing on a fresh testbed, and after a UDP
// flood far over a 1 Mbit/s link's 100 ms queue, a positive total with the sender's link named.
TEST(TestbedScript, DropsCountsWhatAFullLinkDropped) {
  if (!netns_usable()) GTEST_SKIP() << "needs root and ip netns";
  const std::string prefix = "mt-tdrop";
  const Result up = testbed("up 2 flat 1mbit", prefix);
  if (up.rc != 0) {
    testbed("down", prefix);
    FAIL() << up.out;
  }
  const Result before = testbed("drops", prefix);
  // The testbed's own cross traffic: host 0 floods host 1 with UDP for 2 s, far over 1 Mbit/s,
  // so most of it is dropped by host 0's link (the flood sleeps after that until killed).
  sh("timeout 4 bash " + kScript + " cross 0 1 2 10 >/dev/null", prefix);
  const Result after = testbed("drops", prefix);
  testbed("down", prefix);
  EXPECT_EQ(before.rc, 0) << before.out;
  EXPECT_EQ(before.out, "total 0\n");
  std::smatch total;
  ASSERT_TRUE(std::regex_search(after.out, total, std::regex("total ([0-9]+)\n$"))) << after.out;
  EXPECT_GT(std::stol(total[1]), 100) << after.out;
  EXPECT_TRUE(contains(after.out, prefix + "-h0 eth0 ")) << after.out;
}

// A real testbed with HOST_CPUS: `run` starts the command inside its host's cgroup, the quota is
// what was asked, and `down` removes the cgroups with the namespaces.
TEST(TestbedScript, HostCpusRunsCommandsInTheirHostsCgroupAndDownRemovesIt) {
  if (!netns_usable()) GTEST_SKIP() << "needs root and ip netns";
  const std::string prefix = "mt-tcpu";
  std::string dir, quota_file, quota;
  if (sh("test -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us").rc == 0) {
    dir = "/sys/fs/cgroup/cpu/", quota_file = "cpu.cfs_quota_us", quota = "5000";
  } else if (sh("grep -qw cpu /sys/fs/cgroup/cgroup.controllers").rc == 0) {
    dir = "/sys/fs/cgroup/", quota_file = "cpu.max", quota = "5000 10000";
  } else {
    GTEST_SKIP() << "no cpu cgroup on this machine";
  }
  const Result up = sh("HOST_CPUS=0.5 bash " + kScript + " up 2 flat 100mbit", prefix);
  if (up.rc != 0) {
    testbed("down", prefix);
    FAIL() << up.out;
  }
  if (contains(up.out, "cannot set")) {  // read-only cgroups (a container): said, and no quota
    testbed("down", prefix);
    GTEST_SKIP() << up.out;
  }
  const Result in_cgroup = testbed("run 1 -- cat /proc/self/cgroup", prefix);
  const Result limit = sh("cat " + dir + prefix + "-h1/" + quota_file);
  const Result down = testbed("down", prefix);
  EXPECT_TRUE(contains(in_cgroup.out, "/" + prefix + "-h1\n")) << in_cgroup.out;
  EXPECT_EQ(limit.out, quota + "\n");
  EXPECT_EQ(down.rc, 0) << down.out;
  EXPECT_NE(sh("test -e " + dir + prefix + "-h0").rc, 0);
  EXPECT_NE(sh("test -e " + dir + prefix + "-h1").rc, 0);
  EXPECT_EQ(sh("ip netns list | grep " + prefix + "-").out, "");
}

}  // namespace
