// The cost model of the partitioned methods (dist/predict/partition_cost_model.h): BSP-PS,
// WFBP-PS and ByteScheduler on allreduce and on the parameter server, on DAGs of two layers
// small enough to follow by hand (times in seconds, one byte = 1 ms on a link unless said).
// Every test's figure would change if the method were predicted as plain BSP allreduce.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "dist/predict/network_model.h"
#include "dist/predict/partition_cost_model.h"
#include "dist/predict/scaling.h"
#include "support/test_helpers.h"

using namespace mt::dist;
using mt::testing::contains;
using mt::testing::error_of;

namespace {

PsLinks ps(int workers, int servers, double latency = 0.0, double seconds_per_byte = 1e-3) {
  PsLinks l;
  l.workers = workers;
  l.servers = servers;
  l.latency = latency;
  l.worker_seconds_per_byte = l.server_seconds_per_byte = seconds_per_byte;
  return l;
}

bool on_path(const Prediction& p, const std::string& task) {
  return std::find(p.critical_path.begin(), p.critical_path.end(), task) != p.critical_path.end();
}

}  // namespace

// One layer of 400 B in two 200 B partitions, 4 workers, backward 1 s, BSP-PS. A push takes
// 0.2 s on a worker's link and 4 x 0.2 = 0.8 s on its server's (every worker's copy).
//   1 server:  server in 1.0-1.8 (p0), 1.8-2.6 (p1); out 1.8-2.6 (p0), 2.6-3.4 (p1): 3.4 s
//   2 servers: both in 1.0-1.8 at once, both out 1.8-2.6: 2.6 s. The pushes take half as long.
TEST(PartitionCostModel, TwoServersHalveTheServerBoundPush) {
  const std::vector<LayerCost> layers = {{0.0, 1.0, 400.0}};
  const LinearCost unused;
  const Prediction one = predict_partitioned(layers, 0.0, bsp_ps(200), unused, ps(4, 1));
  const Prediction two = predict_partitioned(layers, 0.0, bsp_ps(200), unused, ps(4, 2));
  EXPECT_NEAR(one.iteration, 3.4, 1e-12);
  EXPECT_NEAR(two.iteration, 2.6, 1e-12);
  EXPECT_NEAR(one.backward_end, 1.0, 1e-12);
  EXPECT_TRUE(on_path(one, "server 0 link: push 1")) << ::testing::PrintToString(one.critical_path);
  // A ring allreduce of the same 400 B on 4 ranks moves 2(n-1)/n x 400 = 600 B per link: 0.6 s.
  // The PS's 1 server is the bottleneck the ring does not have; that is the point of the model.
  const NetworkModel flat({8e-6, 0.0});  // 1000 B/s: 1 ms per byte, no latency
  const Prediction ring = predict_schedule(Schedule::BSP, layers, flat.allreduce(4), 0.0, 0, 0);
  EXPECT_NEAR(ring.iteration, 1.6, 1e-9);
}

// Two layers of 200 B, 2 workers, 1 server: a push 0.2 s on the worker link, 0.4 s on the server.
//   WFBP-PS: layer 1's partition goes at 1.0 (pulled at 1.8), layer 0's at 2.0: in 2.0-2.4,
//            out 2.4-2.8.
//   BSP-PS:  both at 2.0: in 2.0-2.4-2.8, out 2.4-2.8 (p0) then 2.8-3.2 (p1).
TEST(PartitionCostModel, WfbpPsPushesDuringBackward) {
  const std::vector<LayerCost> layers = {{0.0, 1.0, 200.0}, {0.0, 1.0, 200.0}};
  const LinearCost unused;
  EXPECT_NEAR(predict_partitioned(layers, 0.0, wfbp_ps(200), unused, ps(2, 1)).iteration, 2.8, 1e-12);
  EXPECT_NEAR(predict_partitioned(layers, 0.0, bsp_ps(200), unused, ps(2, 1)).iteration, 3.2, 1e-12);
  // Latency: each of the four link tasks on the path pays it once (push in, pull out): +4 x 0.01.
  EXPECT_NEAR(predict_partitioned(layers, 0.0, wfbp_ps(200), unused, ps(2, 1, 0.01)).iteration, 2.82, 1e-12);
}

// ByteScheduler on a ring that moves a byte in 1 ms, no start-up; credit one 200 B partition.
// Layer 1 (2000 B, ten partitions) is ready at 1.0, layer 0 (200 B) at 2.0, forward 0.5 s each.
//   link: layer 1's partitions 1.0-2.0 (five), layer 0's 2.0-2.2 (priority: it overtakes the five
//         left), layer 1's last five 2.2-3.2
//   next forward 0 at 2.2-2.7 (gated: it waits for layer 0 only), forward 1 at 3.2-3.7: 3.7 s.
// Without gating (forward after all): 3.2 + 1.0 = 4.2. Without priority (push order): layer 0
// goes last, 3.0-3.2, and forward 0 starts at 3.2: 4.2. Without a credit window (everything in
// flight at once) layer 0 queues behind all of layer 1 on the link: 4.2 too.
TEST(PartitionCostModel, ByteSchedulerPriorityAndGatingOnAllreduce) {
  const std::vector<LayerCost> layers = {{0.5, 1.0, 200.0}, {0.5, 1.0, 2000.0}};
  const LinearCost ring{0.0, 1e-3};
  const PsLinks unused;
  const Prediction p = predict_partitioned(layers, 0.0, bytescheduler(Architecture::AllReduce, 200, 200), ring, unused);
  EXPECT_NEAR(p.iteration, 3.7, 1e-12);
  EXPECT_NEAR(p.comm_end, 3.2, 1e-12);
  // Forward of layer 0 ran before the last partition arrived: only 0.5 of the 1.0 s of forward is after it.
  EXPECT_LT(p.iteration - p.comm_end, 1.0 - 1e-9);
  EXPECT_TRUE(on_path(p, "next forward 1")) << ::testing::PrintToString(p.critical_path);

  PartitionSchedule ungated = bytescheduler(Architecture::AllReduce, 200, 200);
  ungated.gated_forward = false;
  EXPECT_NEAR(predict_partitioned(layers, 0.0, ungated, ring, unused).iteration, 4.2, 1e-12);
  PartitionSchedule push_order = bytescheduler(Architecture::AllReduce, 200, 200);
  push_order.input_first = false;
  EXPECT_NEAR(predict_partitioned(layers, 0.0, push_order, ring, unused).iteration, 4.2, 1e-12);
  EXPECT_NEAR(predict_partitioned(layers, 0.0, bytescheduler(Architecture::AllReduce, 200, 0), ring, unused).iteration,
              4.2, 1e-12);
  // Plain BSP allreduce of the 2200 B after backward: 2.0 + 2.2 + 1.0 (forward) = 5.2.
  EXPECT_NEAR(predict_schedule(Schedule::BSP, layers, ring, 0.0, 0, 0).iteration, 5.2, 1e-12);
  // The model's credit search finds the one-partition window (400 B ties with it; from 800 B on,
  // layer 0 queues behind partitions already in flight), the first of the fastest.
  const CreditChoice c = best_credit(layers, 0.0, Architecture::AllReduce, 200, ring, unused);
  EXPECT_DOUBLE_EQ(c.credit_bytes, 200.0);
  EXPECT_NEAR(c.prediction.iteration, 3.7, 1e-12);
  ASSERT_EQ(c.tried.size(), 5u);  // 200, 400, 800, 1600, 3200 (the first >= 2200 B)
  EXPECT_DOUBLE_EQ(c.tried.back().first, 3200.0);
}

// The update is shared by bytes: layer 0 has 200 of 2200 B, so 1/11 of it before forward 0.
TEST(PartitionCostModel, GatedUpdateIsSharedByLayerBytes) {
  const std::vector<LayerCost> layers = {{0.5, 1.0, 200.0}, {0.5, 1.0, 2000.0}};
  const LinearCost ring{0.0, 1e-3};
  const PsLinks unused;
  // 2.2 + 0.11 (update 0) + 0.5 = 2.81 < 3.2, so update 1 (1.1 s) starts at 3.2: 3.2 + 1.1 + 0.5.
  const Prediction p = predict_partitioned(layers, 1.21, bytescheduler(Architecture::AllReduce, 200, 200), ring, unused);
  EXPECT_NEAR(p.iteration, 4.8, 1e-12);
}

// Start-ups pipeline when partitions fly together: one layer of four 200 B partitions, alpha 1 s,
// 0.2 s of transfer each, ready at 1.0.
//   credit 200:  one after another, 1.2 s each: 1.0 + 4.8 = 5.8
//   credit 400:  p0, p1 start up 1-2, transfer 2-2.2, 2.2-2.4; p2 launched at 2.2 (3.2-3.4), p3 at
//                2.4 (3.4-3.6): 3.6
//   credit 800:  all start up 1-2, transfers 2-2.8: 2.8 (the model's pick)
TEST(PartitionCostModel, CreditLetsStartUpsOverlap) {
  const std::vector<LayerCost> layers = {{0.0, 1.0, 800.0}};
  const LinearCost ring{1.0, 1e-3};
  const PsLinks unused;
  auto at = [&](double credit) {
    return predict_partitioned(layers, 0.0, bytescheduler(Architecture::AllReduce, 200, credit), ring, unused).iteration;
  };
  EXPECT_NEAR(at(200), 5.8, 1e-12);
  EXPECT_NEAR(at(400), 3.6, 1e-12);
  EXPECT_NEAR(at(800), 2.8, 1e-12);
  const CreditChoice c = best_credit(layers, 0.0, Architecture::AllReduce, 200, ring, unused);
  EXPECT_DOUBLE_EQ(c.credit_bytes, 800.0);
  ASSERT_EQ(c.tried.size(), 3u);
}

// ByteScheduler on the PS: 4 workers, 1 server, credit one 200 B partition. A push takes 0.2 s
// on a worker's link and 0.8 s on the server's (all 4 copies); its bytes return to the credit
// with the server's receipt, when the server's link has taken it (not when the pull is back).
// Layer 1 (1000 B, p0-p4) is ready at 1.0, layer 0 (200 B, p5) at 2.0, forward 0.5 s each:
//   server in:  p0 1.0-1.8, p1 1.8-2.6, then p5 overtakes (ready since 2.0) 2.6-3.4, p2-p4 3.4-5.8
//   server out: p0 1.8-2.6, p1 2.6-3.4, p5 3.4-4.2, p2-p4 4.2-6.6
//   next forward 0 at 4.2-4.7 (gated: it waits for layer 0 only), forward 1 at 6.6-7.1: 7.1 s.
// Without gating: 6.6 + 1.0 = 7.6. Push order (p5 last) or no credit (all at once): p5 queues
// behind p0-p4 on the server, in 5.0-5.8, out 5.8-6.6, forwards 6.6-7.6. A credit held until the pull is back: p1 goes at 2.6, p5 at 4.2, forward 0 at 5.8.
TEST(PartitionCostModel, ByteSchedulerPriorityAndGatingOnTheParameterServer) {
  const std::vector<LayerCost> layers = {{0.5, 1.0, 200.0}, {0.5, 1.0, 1000.0}};
  const LinearCost unused;
  const PartitionSchedule bs = bytescheduler(Architecture::ParameterServer, 200, 200);
  const Prediction p = predict_partitioned(layers, 0.0, bs, unused, ps(4, 1));
  EXPECT_NEAR(p.iteration, 7.1, 1e-12);
  EXPECT_NEAR(p.comm_end, 6.6, 1e-12);
  PartitionSchedule ungated = bs;
  ungated.gated_forward = false;
  EXPECT_NEAR(predict_partitioned(layers, 0.0, ungated, unused, ps(4, 1)).iteration, 7.6, 1e-12);
  PartitionSchedule push_order = bs;
  push_order.input_first = false;
  EXPECT_NEAR(predict_partitioned(layers, 0.0, push_order, unused, ps(4, 1)).iteration, 7.6, 1e-12);
  EXPECT_NEAR(predict_partitioned(layers, 0.0, bytescheduler(Architecture::ParameterServer, 200, 0), unused, ps(4, 1))
                  .iteration,
              7.6, 1e-12);
  // WFBP-PS (no credit, push order, no gating), 1 worker: pushes 1.0-2.0 and 2.0-2.2 on the
  // worker's link, pulls 1.2-2.2 and 2.2-2.4; update and forward: 2.4 + 1.0 = 3.4.
  EXPECT_NEAR(predict_partitioned(layers, 0.0, wfbp_ps(200), unused, ps(1, 1)).iteration, 3.4, 1e-12);
}

TEST(PartitionCostModel, BadInputIsRefusedWithWhatToFix) {
  const std::vector<LayerCost> layers = {{0.0, 1.0, 400.0}};
  const LinearCost ring{0.0, 1e-3};
  EXPECT_TRUE(contains(error_of([&] { predict_partitioned(layers, 0.0, bsp_ps(2), ring, ps(2, 1)); }),
                       "partition_bytes"));
  EXPECT_TRUE(contains(error_of([&] { predict_partitioned(layers, 0.0, bsp_ps(200), ring, ps(2, 0)); }),
                       "0 servers"));
  EXPECT_TRUE(contains(error_of([&] { predict_partitioned({}, 0.0, bsp_ps(200), ring, ps(2, 1)); }), "one layer"));
  EXPECT_TRUE(contains(error_of([&] { predict_partitioned({{0.0, -1.0, 4.0}}, 0.0, bsp_ps(200), ring, ps(2, 1)); }),
                       ">= 0"));
  NetworkSpec racks;
  racks.ranks_per_rack = 2;
  racks.inter_bandwidth_gbps = 1;
  EXPECT_TRUE(contains(error_of([&] { (void)NetworkModel(racks).ps_links(4, 1); }), "one level"));
}

// The network model gives the PS one link per worker and server: latency, and 1 / bandwidth.
TEST(PartitionCostModel, NetworkModelPsLinks) {
  const NetworkModel net({1.0, 50.0});  // 1 Gbit/s, 50 us
  const PsLinks l = net.ps_links(8, 2);
  EXPECT_EQ(l.workers, 8);
  EXPECT_EQ(l.servers, 2);
  EXPECT_DOUBLE_EQ(l.latency, 50e-6);
  EXPECT_DOUBLE_EQ(l.worker_seconds_per_byte, 8.0 / 1e9);
  EXPECT_DOUBLE_EQ(l.server_seconds_per_byte, 8.0 / 1e9);
}

// Out of sample: profiles at n = 2 and 4 of a ring on 1 Gbit/s links with 50 us per hop give
// that network back, so N = 8 is predicted from the network model alone.
TEST(PartitionCostModel, CalibrationFromProfilesAtOtherN) {
  const NetworkModel truth({1.0, 50.0});
  std::vector<mt::dist::MeasuredComm> profiles;
  for (int n : {2, 4}) {
    mt::dist::MeasuredComm m;
    m.world = n;
    m.cost = truth.allreduce(n);
    profiles.push_back(m);
  }
  // The two disagree in this copy: 2 implies 40 us per hop, 4 implies 60; the mean is 50.
  profiles[0].cost.alpha = 2 * 1 * 40e-6;
  profiles[1].cost.alpha = 2 * 3 * 60e-6;
  const mt::dist::CalibratedNetwork c = mt::dist::calibrate_network(NetworkSpec{}, false, profiles);
  EXPECT_NEAR(c.spec.latency_us, 50.0, 1e-9);
  EXPECT_NEAR(c.spec.bandwidth_gbps, 1.0, 1e-9);
  const LinearCost eight = NetworkModel(c.spec).allreduce(8);
  EXPECT_NEAR(eight.alpha, 14 * 50e-6, 1e-12);
  EXPECT_NEAR(eight.beta, truth.allreduce(8).beta, 1e-18);
  // With a nominal bandwidth, the efficiency is the mean of the two (here both 0.5).
  NetworkSpec nominal;
  nominal.bandwidth_gbps = 2.0;
  const mt::dist::CalibratedNetwork e = mt::dist::calibrate_network(nominal, true, profiles);
  EXPECT_NEAR(e.efficiency, 0.5, 1e-12);
  EXPECT_NEAR(e.spec.bandwidth_gbps, 1.0, 1e-12);
}

// `mintrain model`'s row fills the seven methods; the PS is left out on two levels.
TEST(PartitionCostModel, PredictRowHasTheSevenMethods) {
  mt::dist::ModelProfile prof;
  prof.layers = {{"a", 0.5, 1.0, 200.0}, {"b", 0.5, 1.0, 2000.0}};
  mt::dist::AlgorithmSettings s;
  s.partition_bytes = 200;
  s.ps_servers = 2;
  const NetworkModel net({8e-6, 0.0});  // 1 ms per byte
  const mt::dist::ScalingRow row = mt::dist::predict_row(prof, net, s, 4);
  EXPECT_TRUE(row.ps_modelled);
  EXPECT_GT(row.bsp_ps.iteration, row.wfbp_ps.iteration);
  EXPECT_LE(row.bytescheduler_ps.iteration, row.wfbp_ps.iteration + 1e-12);  // its credit search includes "all"
  EXPECT_GT(row.credit_a2a, 0.0);
  EXPECT_GT(row.credit_ps, 0.0);
  EXPECT_LT(row.bytescheduler_a2a.iteration, row.bsp.iteration);
  s.credit_bytes = 400;
  EXPECT_DOUBLE_EQ(mt::dist::predict_row(prof, net, s, 4).credit_a2a, 400.0);
  NetworkSpec racks;
  racks.ranks_per_rack = 2;
  racks.inter_bandwidth_gbps = 1;
  EXPECT_FALSE(mt::dist::predict_row(prof, NetworkModel(racks), s, 4).ps_modelled);
}
