// The network model: collective costs on one- and two-level networks, each checked against the
// formula of network_model.h worked out by hand for small numbers.
#include <gtest/gtest.h>

#include "core/error.h"
#include "dist/predict/network_model.h"

using namespace mt::dist;

namespace {

// 1 Gbit/s = 1.25e8 bytes/s; 10 Gbit/s = 1.25e9 bytes/s.
NetworkModel two_racks(AllreduceAlgorithm algorithm) {
  NetworkSpec s;
  s.bandwidth_gbps = 10;
  s.latency_us = 10;
  s.ranks_per_rack = 4;
  s.inter_bandwidth_gbps = 1;
  s.inter_latency_us = 100;
  s.algorithm = algorithm;
  return NetworkModel(s);
}

}  // namespace

TEST(NetworkModel, FlatRingAllreduceByHand) {
  NetworkSpec s;
  s.bandwidth_gbps = 1;
  s.latency_us = 50;
  const NetworkModel net(s);
  // n = 4: 2*3 steps of 50 us; 2*3/4 * M over 1.25e8 bytes/s.
  const LinearCost c = net.allreduce(4);
  EXPECT_NEAR(c.alpha, 300e-6, 1e-12);
  EXPECT_NEAR(c.beta, 1.2e-8, 1e-20);
  EXPECT_NEAR(c.time(1e6), 0.0123, 1e-12);
  // One worker communicates nothing; two: 2 steps, M / bw.
  EXPECT_EQ(net.allreduce(1).time(1e9), 0.0);
  EXPECT_NEAR(net.allreduce(2).time(1.25e8), 100e-6 + 1.0, 1e-12);
  // Large n: the bandwidth term tends to 2 M / bw, the latency term grows linearly.
  EXPECT_NEAR(net.allreduce(1024).beta, 2.0 * 1023 / 1024 / 1.25e8, 1e-20);
  EXPECT_NEAR(net.allreduce(1024).alpha, 2046 * 50e-6, 1e-12);
  EXPECT_EQ(net.racks(1024), 1);
}

TEST(NetworkModel, FlatAllgatherByHand) {
  NetworkSpec s;
  s.bandwidth_gbps = 1;
  s.latency_us = 50;
  const NetworkModel net(s);
  // n = 4: 3 steps of 50 us, each rank receives 3 payloads.
  EXPECT_NEAR(net.allgather(4).alpha, 150e-6, 1e-12);
  EXPECT_NEAR(net.allgather(4).beta, 3 / 1.25e8, 1e-20);
  EXPECT_EQ(net.allgather(1).time(1e6), 0.0);
}

TEST(NetworkModel, TwoLevelRingIsBoundedBySlowestLink) {
  const NetworkModel net = two_racks(AllreduceAlgorithm::Ring);
  EXPECT_EQ(net.racks(4), 1);
  EXPECT_EQ(net.racks(8), 2);
  EXPECT_EQ(net.racks(9), 3);  // a rack that is not full still counts
  // Inside one rack: the fast link only. n = 4: 6 x 10 us, 6/4 / 1.25e9.
  EXPECT_NEAR(net.allreduce(4).alpha, 60e-6, 1e-12);
  EXPECT_NEAR(net.allreduce(4).beta, 1.2e-9, 1e-20);
  // n = 8 over two racks: 14 steps at the slow link's 100 us; 14/8 / 1.25e8.
  EXPECT_NEAR(net.allreduce(8).alpha, 1.4e-3, 1e-12);
  EXPECT_NEAR(net.allreduce(8).beta, 1.4e-8, 1e-20);
  // Allgather: 7 steps, 7 payloads over the slow link.
  EXPECT_NEAR(net.allgather(8).alpha, 700e-6, 1e-12);
  EXPECT_NEAR(net.allgather(8).beta, 7 / 1.25e8, 1e-20);
}

TEST(NetworkModel, HierarchicalAllreduceByHand) {
  const NetworkModel net = two_racks(AllreduceAlgorithm::Hierarchical);
  // r = 4, R = 2: alpha = 2*3*10us + 2*1*100us = 260 us;
  // beta = 2*3/4 / 1.25e9 + 2*1/2 / 1.25e8 = 1.2e-9 + 8e-9.
  EXPECT_NEAR(net.allreduce(8).alpha, 260e-6, 1e-12);
  EXPECT_NEAR(net.allreduce(8).beta, 9.2e-9, 1e-20);
  // Cheaper than the flat ring on this network, for small and large messages.
  const NetworkModel ring = two_racks(AllreduceAlgorithm::Ring);
  EXPECT_LT(net.allreduce(8).time(1e3), ring.allreduce(8).time(1e3));
  EXPECT_LT(net.allreduce(8).time(1e8), ring.allreduce(8).time(1e8));
  // The explicit overload ignores the spec's algorithm.
  EXPECT_DOUBLE_EQ(net.allreduce(8, AllreduceAlgorithm::Ring).alpha, ring.allreduce(8).alpha);
  // Allgather: alpha = 2*3*10us + 1*100us; beta = 3*2 / 1.25e9 + 1*4 / 1.25e8.
  EXPECT_NEAR(net.allgather(8).alpha, 160e-6, 1e-12);
  EXPECT_NEAR(net.allgather(8).beta, 4.8e-9 + 3.2e-8, 1e-20);
}

TEST(NetworkModel, HierarchicalAllreduceInPiecesByHand) {
  const LinearCost c = two_racks(AllreduceAlgorithm::Hierarchical).allreduce(8);
  // A = 1.2e-9 s/B in the rack, X = 8e-9 s/B across: the one-piece form is their sum.
  EXPECT_NEAR(c.in_rack_beta, 1.2e-9, 1e-20);
  EXPECT_NEAR(c.cross_beta, 8e-9, 1e-20);
  // Below 512 KiB one piece: alpha + (A + X) M.
  EXPECT_NEAR(c.time(100e3), 260e-6 + 9.2e-9 * 100e3, 1e-12);
  // 1 MiB goes in 4 pieces: (A + X) M / 4 + 3 X M / 4 = 8.3e-9 M.
  const double mib = 1 << 20;
  EXPECT_NEAR(c.time(mib), 260e-6 + 8.3e-9 * mib, 1e-12);
  // From 2 MiB on, 8 pieces: 9.2e-9 / 8 + 7 * 8e-9 / 8 = 8.15e-9 per byte.
  EXPECT_NEAR(c.time(64 * mib), 260e-6 + 8.15e-9 * 64 * mib, 1e-9);
  // The pipelined form never costs more than the serial one, nor less than the crossing alone.
  for (double m : {600e3, 3e6, 1e8}) {
    EXPECT_LE(c.time(m), c.alpha + c.beta * m + 1e-15);
    EXPECT_GE(c.time(m), c.alpha + c.cross_beta * m);
  }
  // The ring has no levels: its time stays the line.
  const LinearCost ring = two_racks(AllreduceAlgorithm::Ring).allreduce(8);
  EXPECT_EQ(ring.in_rack_beta, 0.0);
  EXPECT_NEAR(ring.time(mib), ring.alpha + ring.beta * mib, 1e-15);
}

TEST(NetworkModel, GroupAllreduceInsideAndAcrossRacks) {
  const NetworkModel net = two_racks(AllreduceAlgorithm::Ring);
  // g = 2 inside a rack: 2 steps of 10 us, 2*1/2 / 1.25e9.
  EXPECT_NEAR(net.group_allreduce(2, false).alpha, 20e-6, 1e-12);
  EXPECT_NEAR(net.group_allreduce(2, false).beta, 8e-10, 1e-20);
  // Across racks with 4 group rings sharing each uplink: 100 us hops, 1.25e8 / 4 bytes/s.
  EXPECT_NEAR(net.group_allreduce(2, true, 4).alpha, 200e-6, 1e-12);
  EXPECT_NEAR(net.group_allreduce(2, true, 4).beta, 1.0 / 3.125e7, 1e-20);
  // One ring alone gets the whole uplink.
  EXPECT_NEAR(net.group_allreduce(2, true, 1).beta, 1.0 / 1.25e8, 1e-20);
  EXPECT_EQ(net.group_allreduce(1, true, 4).time(1e9), 0.0);
  // On a one-level network "across racks" means nothing.
  NetworkSpec flat;
  flat.bandwidth_gbps = 10;
  flat.latency_us = 10;
  EXPECT_DOUBLE_EQ(NetworkModel(flat).group_allreduce(4, true, 8).beta,
                   NetworkModel(flat).group_allreduce(4, false).beta);
}

TEST(NetworkModel, RejectsBadSpecsNamingTheFlag) {
  NetworkSpec s;
  s.bandwidth_gbps = 0;
  try {
    NetworkModel net(s);
    FAIL() << "zero bandwidth accepted";
  } catch (const mt::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--bandwidth-gbps"), std::string::npos) << e.what();
  }
  NetworkSpec racks;
  racks.ranks_per_rack = 4;  // no inter-rack bandwidth
  EXPECT_THROW(NetworkModel{racks}, mt::core::Error);
  s.bandwidth_gbps = 1;
  s.latency_us = -1;
  EXPECT_THROW(NetworkModel{s}, mt::core::Error);
  EXPECT_THROW(parse_allreduce_algorithm("tree"), mt::core::Error);
  EXPECT_EQ(parse_allreduce_algorithm("hierarchical"), AllreduceAlgorithm::Hierarchical);
}
