// The cost model: the T(M) = alpha + beta*M fit, the DAG critical path, and the merge plans
// (FUSION packing, MG-WFBP merging) on cases small enough to compute by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/config.h"
#include "apps/model_command.h"
#include "core/error.h"
#include "dist/predict/cost_model.h"
#include "dist/predict/network_model.h"
#include "dist/predict/scaling.h"
#include "support/test_helpers.h"

using namespace mt::dist;
using mt::testing::contains;
using mt::testing::error_of;

TEST(CostModel, FitRecoversAlphaBetaFromSyntheticTimings) {
  // t = 50 us + 1 ns/byte, with +-1% alternating noise.
  std::vector<double> bytes, secs;
  int i = 0;
  for (double m : {1e3, 1e4, 1e5, 1e6, 4e6}) {
    for (int r = 0; r < 3; ++r, ++i) {
      bytes.push_back(m);
      secs.push_back((50e-6 + 1e-9 * m) * (i % 2 ? 1.01 : 0.99));
    }
  }
  const LinearCost c = fit_linear_cost(bytes, secs);
  EXPECT_NEAR(c.alpha, 50e-6, 5e-6);
  EXPECT_NEAR(c.beta, 1e-9, 0.02e-9);
  EXPECT_NEAR(c.time(2e6), 50e-6 + 2e-3, 5e-5);
  // Exact data: exact fit.
  const LinearCost e = fit_linear_cost({0, 10, 20}, {1, 3, 5});
  EXPECT_DOUBLE_EQ(e.alpha, 1.0);
  EXPECT_DOUBLE_EQ(e.beta, 0.2);
  EXPECT_THROW(fit_linear_cost({5, 5}, {1, 2}), mt::core::Error);
}

TEST(CostModel, FitWeighsEverySizeAlike) {
  // t = 1 ms + 1 ns/byte, the two large sizes off by +10% and -5% (a stall, a lucky run). Plain
  // least squares would let them decide alpha (1.13 ms); in relative error the small sizes
  // pin it (1.004 ms).
  std::vector<double> bytes = {1e3, 1e4, 4e6, 8e6}, secs;
  for (double m : bytes) secs.push_back(1e-3 + 1e-9 * m);
  secs[2] *= 1.10;
  secs[3] *= 0.95;
  const LinearCost c = fit_linear_cost(bytes, secs);
  EXPECT_NEAR(c.alpha, 1e-3, 0.02e-3);
  EXPECT_NEAR(c.beta, 1e-9, 0.05e-9);
  EXPECT_THROW(fit_linear_cost({1e3, 1e4}, {1e-3, 0.0}), mt::core::Error);  // a zero time
}

TEST(CostModel, MeasuredCurveBeatsTheLineWhereItWasMeasured) {
  LinearCost c{1e-3, 1e-9, 0.0};
  EXPECT_DOUBLE_EQ(c.time(1e6), 2e-3);  // no curve: the line
  // Given in any order; a tbf-like curve: 64 KB quick (burst), 1 MB at the link's rate.
  set_measured_curve(c, {1e6, 1e3, 64e3}, {4e-3, 1.5e-3, 1.6e-3});
  EXPECT_EQ(c.measured_bytes, (std::vector<double>{1e3, 64e3, 1e6}));
  EXPECT_DOUBLE_EQ(c.time(1e3), 1.5e-3);                                   // a measured size
  EXPECT_DOUBLE_EQ(c.time(100), 1.5e-3);                                   // below: the smallest's time
  EXPECT_NEAR(c.time(32.5e3), 1.55e-3, 1e-15);                             // halfway between 1 KB and 64 KB
  EXPECT_NEAR(c.time(532e3), 1.6e-3 + 0.5 * 2.4e-3, 1e-15);                // halfway between 64 KB and 1 MB
  EXPECT_NEAR(c.time(3e6), 4e-3 + 1e-9 * 2e6, 1e-15);                      // above: slope beta
  EXPECT_DOUBLE_EQ(c.alpha, 1e-3);  // the line stays for other scales and MG-WFBP's rule (b)
  // Bad curves are errors that say so.
  EXPECT_TRUE(contains(error_of([&] { set_measured_curve(c, {1e3, 1e3}, {1e-3, 2e-3}); }), "twice"));
  EXPECT_TRUE(contains(error_of([&] { set_measured_curve(c, {1e3}, {0.0}); }), "> 0"));
  EXPECT_TRUE(contains(error_of([&] { set_measured_curve(c, {1e3, 2e3}, {1e-3}); }), "one time per size"));
}

// The after-idle curve: a link that idled is faster (a tbf bucket refills), so a message that
// follows idle_measured or more of quiet network takes the after-idle time, one that follows less
// a proportional share of the saving, and one right after another the back-to-back time.
TEST(CostModel, AfterIdleCurveByHand) {
  LinearCost c{1e-3, 1e-9, 0.0};
  set_measured_curve(c, {1e3, 1e6}, {2e-3, 10e-3});
  EXPECT_DOUBLE_EQ(c.time(1e6, 5e-3), 10e-3);  // no after-idle curve: idle changes nothing
  set_idle_curve(c, {1e6, 1e3}, {6e-3, 1e-3}, 4e-3);  // any order of sizes
  EXPECT_DOUBLE_EQ(c.time(1e6, 0.0), 10e-3);
  EXPECT_DOUBLE_EQ(c.time(1e6), 10e-3);
  EXPECT_NEAR(c.time(1e6, 1e-3), 9e-3, 1e-15);  // a quarter of the idle: a quarter of the 4 ms saved
  EXPECT_NEAR(c.time(1e6, 4e-3), 6e-3, 1e-15);
  EXPECT_NEAR(c.time(1e6, 1.0), 6e-3, 1e-15);   // a full bucket saves no more
  EXPECT_NEAR(c.time(1e3, 2e-3), 1.5e-3, 1e-15);
  EXPECT_NEAR(c.time(500.5e3, 4e-3), 3.5e-3, 1e-15);  // between the sizes on the after-idle curve
  // New measured sizes drop the old after-idle curve with them.
  set_measured_curve(c, {1e3, 1e6}, {2e-3, 10e-3});
  EXPECT_DOUBLE_EQ(c.time(1e6, 4e-3), 10e-3);
  EXPECT_TRUE(contains(error_of([&] { set_idle_curve(c, {1e3}, {1e-3}, 4e-3); }), "one time for each"));
  EXPECT_TRUE(contains(error_of([&] { set_idle_curve(c, {1e3, 2e3}, {1e-3, 1e-3}, 4e-3); }),
                       "which the measured curve has not"));
  EXPECT_TRUE(contains(error_of([&] { set_idle_curve(c, {1e3, 1e6}, {1e-3, 6e-3}, 0.0); }), "idle time > 0"));
  EXPECT_TRUE(contains(error_of([&] { set_idle_curve(c, {1e3, 1e6}, {1e-3, 0.0}, 4e-3); }), "times > 0"));
}

// In the DAG: a message's idle is the time since the previous message ended, and for the first
// one since the previous iteration's last (this forward, this backward so far, and its update).
TEST(CostModel, MessagesAfterIdleNetworkTakeTheAfterIdleTime) {
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};  // as PredictsBspAndWfbpByHand
  LinearCost cost{1.0, 1.0};
  set_measured_curve(cost, {2, 4}, {3, 5});         // the line's times, back to back
  set_idle_curve(cost, {2, 4}, {1, 2}, 4.0);        // after 4 s of idle network
  // BSP: the message is ready at 5 after 5 + 0.5 s of idle link: 2 s -> 7, update -> 7.5.
  EXPECT_DOUBLE_EQ(predict_schedule(Schedule::BSP, layers, cost, 0.5, 1e9, 1e9).iteration, 7.5);
  // WFBP: layer 1's message at 3 after 3.5 s idle: 3 - 2 * 3.5/4 = 1.25 -> 4.25; layer 0's at 5
  // after 0.75 s idle: 3 - 2 * 0.75/4 = 2.625 -> 7.625; update -> 8.125.
  const Prediction wfbp = predict_schedule(Schedule::WFBP, layers, cost, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(wfbp.comm_end, 7.625);
  EXPECT_DOUBLE_EQ(wfbp.iteration, 8.125);
}

TEST(CostModel, DagCriticalPath) {
  //   a(1) -> b(5) -> d(1)
  //   a(1) -> c(2) ------^      critical: a b d = 7
  Dag g;
  const int a = g.add("a", 1);
  const int b = g.add("b", 5, {a});
  const int c = g.add("c", 2, {a});
  g.add("d", 1, {b, c});
  EXPECT_DOUBLE_EQ(g.critical_length(), 7.0);
  EXPECT_EQ(g.critical_path(), (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_DOUBLE_EQ(g.start(c), 1.0);
  EXPECT_THROW(g.add("e", 1, {9}), mt::core::Error);
}

TEST(CostModel, PredictsBspAndWfbpByHand) {
  // Two layers: forward 1+1, backward layer1 = 1 then layer0 = 2; every gradient 2 bytes with
  // alpha = 1, beta = 1 (one message of one layer: 3 s); update 0.5.
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};
  const LinearCost cost{1.0, 1.0};
  // BSP: backward ends at 2+1+2 = 5; one 4-byte message (5 s) -> 10; update -> 10.5.
  const Prediction bsp = predict_schedule(Schedule::BSP, layers, cost, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(bsp.backward_end, 5.0);
  EXPECT_DOUBLE_EQ(bsp.iteration, 10.5);
  // WFBP: layer 1's message 3..6, layer 0's ready at 5 but the link is busy until 6 -> 9; 9.5.
  const Prediction wfbp = predict_schedule(Schedule::WFBP, layers, cost, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(wfbp.comm_end, 9.0);
  EXPECT_DOUBLE_EQ(wfbp.iteration, 9.5);
  EXPECT_EQ(wfbp.critical_path, (std::vector<std::string>{"forward 0", "forward 1", "backward 1",
                                                           "allreduce 0", "allreduce 1", "update"}));
  // FUSION with a cap that holds both: like BSP without waiting for... the same one message,
  // ready when layer 0 is: 5 + 5 = 10 -> 10.5.
  EXPECT_DOUBLE_EQ(predict_schedule(Schedule::FUSION, layers, cost, 0.5, 100, 100).iteration, 10.5);
  // Communication-free: iteration = compute + update.
  EXPECT_DOUBLE_EQ(predict_schedule(Schedule::WFBP, layers, LinearCost{0, 0}, 0.5, 1, 1).iteration, 5.5);
}

TEST(CostModel, FusionPacksInBackwardOrderWithSmallFirstBucket) {
  // Layers 0..4 of 4,4,4,2,1 bytes; first bucket cap 3, others 8.
  const MergePlan p = fusion_plan({4, 4, 4, 2, 1}, 8, 3);
  // Backward order 4 (1), 3 (2) -> first bucket full at 3; then 2,1 (8); then 0.
  EXPECT_EQ(plan_str(p), "[4 3] [2 1] [0]");
  // A layer bigger than the cap travels alone.
  EXPECT_EQ(plan_str(fusion_plan({1, 100, 1}, 8, 1)), "[2] [1] [0]");
}

TEST(CostModel, MgwfbpMergePlanByHand) {
  const LinearCost cost{1.0, 0.1};  // every 1-byte message: 1.1 s
  // tb = [5, 0.1, 1] (layer 0 slow): layer 2 ready at 1, layer 1 at 1.1, layer 0 at 6.1.
  // l=2: its message 1..2.1 cannot finish before 1.1 and started only 0.1 < alpha earlier: merge
  // into 1 (2 bytes, 1.2 s), starting at 1.1, ending 2.3. l=1: 2.3 < 6.1: no merge.
  EXPECT_EQ(plan_str(mgwfbp_plan({5, 0.1, 1}, {1, 1, 1}, cost)), "[2 1] [0]");
  // tb = [0.2, 0.2, 1]: both merges (the last one: started 1.2, l-1 ready at 1.4, 0.2 < alpha).
  EXPECT_EQ(plan_str(mgwfbp_plan({0.2, 0.2, 1}, {1, 1, 1}, cost)), "[2 1 0]");
  // Long backward gaps: every message finishes before the next gradient: pure WFBP.
  EXPECT_EQ(plan_str(mgwfbp_plan({5, 5, 1}, {1, 1, 1}, cost)), "[2] [1] [0]");
  // The merged plan is never predicted slower than WFBP on these cases.
  std::vector<LayerCost> layers = {{0, 0.2, 1}, {0, 0.2, 1}, {0, 1, 1}};
  EXPECT_LE(predict_schedule(Schedule::MGWFBP, layers, cost, 0, 0, 0).iteration,
            predict_schedule(Schedule::WFBP, layers, cost, 0, 0, 0).iteration);
  // Tiny alpha (0.01), beta 1: messages of 1.01 s. l=2 started at 1, 0.2 before layer 1 is
  // ready (1.2): neither (a) nor (b), no merge. Layer 1's message then waits for the link until
  // 2.01, after layer 0 is ready (1.4): rule (a), merge. Plan: [2] [1 0].
  EXPECT_EQ(plan_str(mgwfbp_plan({0.2, 0.2, 1}, {1, 1, 1}, LinearCost{0.01, 1.0})), "[2] [1 0]");
}

// The plan MG-WFBP runs is chosen from the model: the greedy rule's, unless a simple alternative is
// predicted clearly faster. alpha 1.5, beta 0.1, every layer 1 s of backward; layer 3 has 10
// bytes, the others 1. Greedy: layer 3's message (1..3.5) started 1 s < alpha before each next
// gradient, so rule (b) merges all four into one message, ready at 4: 4 + 1.5 + 1.3 = 6.8 s. Sent
// as [3] (1..3.5) and [2 1 0] (4 + 1.8 = 5.8 s) they end a second earlier: a byte cap of 4 or 8
// finds that split (caps 1 and 2 give WFBP's 8.3 s and 6.8 s).
TEST(CostModel, MgwfbpRunsTheGreedyPlanUnlessTheModelFindsAClearlyFasterOne) {
  const LinearCost cost{1.5, 0.1};
  const std::vector<double> tb = {1, 1, 1, 1}, bytes = {1, 1, 1, 10};
  EXPECT_EQ(plan_str(mgwfbp_plan(tb, bytes, cost)), "[3 2 1 0]");
  EXPECT_EQ(plan_str(mgwfbp_best_plan(tb, bytes, cost)), "[3] [2 1 0]");
  std::vector<LayerCost> layers;
  for (int l = 0; l < 4; ++l) layers.push_back({0, tb[l], bytes[l]});
  EXPECT_NEAR(predict_iteration(layers, mgwfbp_plan(tb, bytes, cost), cost, 0, false).iteration, 6.8, 1e-12);
  EXPECT_NEAR(predict_schedule(Schedule::MGWFBP, layers, cost, 0, 0, 0).iteration, 5.8, 1e-12);
  // Where the greedy plan is the best of them, it stays (the hand cases above).
  const LinearCost unit{1.0, 0.1};
  for (const auto& t : std::vector<std::vector<double>>{{5, 0.1, 1}, {0.2, 0.2, 1}, {5, 5, 1}})
    EXPECT_EQ(plan_str(mgwfbp_best_plan(t, {1, 1, 1}, unit)), plan_str(mgwfbp_plan(t, {1, 1, 1}, unit)));
  // One layer: nothing to choose.
  EXPECT_EQ(plan_str(mgwfbp_best_plan({1}, {4}, cost)), "[0]");
}

TEST(CostModel, ScheduleNames) {
  for (auto s : {Schedule::BSP, Schedule::WFBP, Schedule::FUSION, Schedule::MGWFBP})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  try {
    parse_schedule("wfbp2");
    FAIL();
  } catch (const mt::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mgwfbp"), std::string::npos);
  }
}

TEST(CostModel, MgwfbpFourLayersByHandAndItsGain) {
  // alpha = 1, beta = 0: every message 1 s. tb = [1, 1, 0.5, 0.5]: gradients ready at 0.5
  // (layer 3), 1 (2), 2 (1), 3 (0). l=3: its message 0.5..1.5 cannot finish by 1 and started
  // 0.5 < alpha before: merge into 2 -> [3 2] sent 1..2. l=2: ends at 2, not after layer 1's
  // ready time 2: keep. l=1: 2..3, not after 3: keep. Plan [3 2] [1] [0].
  const LinearCost cost{1.0, 0.0};
  const std::vector<double> tb = {1, 1, 0.5, 0.5}, bytes = {1, 1, 1, 1};
  const MergePlan plan = mgwfbp_plan(tb, bytes, cost);
  EXPECT_EQ(plan_str(plan), "[3 2] [1] [0]");
  std::vector<LayerCost> layers;
  for (int l = 0; l < 4; ++l) layers.push_back({0.0, tb[l], bytes[l]});
  // WFBP: messages 0.5-1.5, 1.5-2.5, 2.5-3.5, 3.5-4.5; MG-WFBP: 1-2, 2-3, 3-4.
  EXPECT_DOUBLE_EQ(predict_iteration(layers, wfbp_plan(4), cost, 0, false).comm_end, 4.5);
  EXPECT_DOUBLE_EQ(predict_iteration(layers, plan, cost, 0, false).comm_end, 4.0);
}

TEST(CostModel, GammaChargesEveryMessageSentDuringBackwardToTheCompute) {
  // The two layers of PredictsBspAndWfbpByHand with gamma = 0.5 per message sent during backward.
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};
  // WFBP: backward 1 ends at 3, its message goes (link 3..6) and takes 0.5 of compute: layer 0's
  // backward runs 3.5..5.5; its message waits for the link until 6 -> 9; update 9.5. The message
  // that layer 0 completes is sent after backward: no gamma for it.
  const Prediction wfbp = predict_schedule(Schedule::WFBP, layers, LinearCost{1.0, 1.0, 0.5}, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(wfbp.backward_end, 5.5);
  EXPECT_DOUBLE_EQ(wfbp.iteration, 9.5);
  // gamma = 2: backward 0 runs 5..7, its message 7..10, update 10.5 = BSP; the stolen compute is
  // now on the critical path.
  const Prediction slow = predict_schedule(Schedule::WFBP, layers, LinearCost{1.0, 1.0, 2.0}, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(slow.iteration, 10.5);
  EXPECT_EQ(slow.critical_path, (std::vector<std::string>{"forward 0", "forward 1", "backward 1",
                                                           "send 0 (CPU)", "backward 0", "allreduce 1",
                                                           "update"}));
  // BSP sends after backward: gamma changes nothing.
  EXPECT_DOUBLE_EQ(predict_schedule(Schedule::BSP, layers, LinearCost{1.0, 1.0, 2.0}, 0.5, 1e9, 1e9).iteration,
                   10.5);
}

TEST(CostModel, OverlapSlowdownChargesTheTimeAMessageOverlapsBackward) {
  // Two layers of 10 ms backward (no forward), WFBP, 16 ms per message, half the compute lost
  // while a message is in flight. Message 0 leaves at 10 and is on the link until 26; layer 0
  // does 8 ms of its work at half speed meanwhile and the last 2 at full speed, so message 0 takes
  // 8 ms of compute, message 1 (after backward) none: backward ends at 28, message 1 runs 28..44.
  LinearCost cost{0.016, 0.0, 0.001};  // gamma is ignored where overlap_slowdown is given
  cost.overlap_slowdown = 0.5;
  const std::vector<LayerCost> two = {{0, 0.010, 100}, {0, 0.010, 100}};
  const Prediction p = predict_iteration(two, wfbp_plan(2), cost, 0.0, false);
  EXPECT_NEAR(p.backward_end, 0.028, 1e-9);
  EXPECT_NEAR(p.iteration, 0.044, 1e-9);
  EXPECT_EQ(p.critical_path, (std::vector<std::string>{"forward 0", "forward 1", "backward 1", "send 0 (CPU)",
                                                        "backward 0", "allreduce 1", "update"}));
  // A message that waits in the queue until backward is over takes nothing from it. Layers of
  // 10, 1 and 1 ms, 100 ms messages: message 0 flies from 10 and takes x = 0.5 (12 + x - 10), so
  // x = 2 and backward ends at 14; message 1 leaves at 11 + x but gets the link only at 110.
  cost = LinearCost{0.100, 0.0, 0.0};
  cost.overlap_slowdown = 0.5;
  const std::vector<LayerCost> three = {{0, 0.001, 100}, {0, 0.001, 100}, {0, 0.010, 100}};
  const Prediction q = predict_iteration(three, wfbp_plan(3), cost, 0.0, false);
  EXPECT_NEAR(q.backward_end, 0.014, 1e-9);
  EXPECT_NEAR(q.iteration, 0.310, 1e-9);
  // With gamma per message instead (the older model), both messages sent during backward pay.
  cost.overlap_slowdown = 0.0;
  cost.gamma = 0.002;
  EXPECT_NEAR(predict_iteration(three, wfbp_plan(3), cost, 0.0, false).backward_end, 0.016, 1e-9);
  // BSP sends after backward: nothing overlaps.
  cost.overlap_slowdown = 0.5;
  EXPECT_NEAR(predict_iteration(three, bsp_plan(3), cost, 0.0, true).backward_end, 0.012, 1e-9);
  cost.overlap_slowdown = 1.0;
  EXPECT_TRUE(mt::testing::contains(mt::testing::error_of([&] { predict_iteration(three, wfbp_plan(3), cost, 0.0, false); }),
                                    "must be in [0, 1), got 1"));
}

TEST(CostModel, MessagesOverlappingBackwardTakeTheDuringComputeTime) {
  // Two layers of 10 ms backward, WFBP, 100-byte messages of 16 ms back to back and 24 ms while
  // the ranks compute. Message 0 leaves at 10 and overlaps backward until 20: of its d ms, 10 go
  // at the slower pace, d = 16 + 8 x 10 / d, so d = 20 (10..30). Message 1 is ready at 20 but
  // gets the link at 30, after backward: 16 ms, 30..46.
  LinearCost cost{0.016, 0.0, 0.0};
  set_measured_curve(cost, {100, 200}, {0.016, 0.016});
  set_busy_curve(cost, {200, 100}, {0.024, 0.024});
  EXPECT_DOUBLE_EQ(cost.time_during_compute(100), 0.024);
  const std::vector<LayerCost> two = {{0, 0.010, 100}, {0, 0.010, 100}};
  const Prediction p = predict_iteration(two, wfbp_plan(2), cost, 0.0, false);
  EXPECT_NEAR(p.backward_end, 0.020, 1e-9);
  EXPECT_NEAR(p.iteration, 0.046, 1e-9);
  // BSP's message follows backward: back to back.
  EXPECT_NEAR(predict_iteration(two, bsp_plan(2), cost, 0.0, true).iteration, 0.020 + 0.016, 1e-12);
  // A new measured curve drops the during-compute one (its sizes are gone).
  set_measured_curve(cost, {100, 200}, {0.016, 0.016});
  EXPECT_TRUE(cost.busy_measured_seconds.empty());
  EXPECT_TRUE(mt::testing::contains(mt::testing::error_of([&] { set_busy_curve(cost, {100, 300}, {0.02, 0.03}); }),
                                    "the during-compute allreduce curve has the size 300"));
}

TEST(CostModel, AMessageSlowedByTheComputeTakesOnlyItsOwnWorkFromIt) {
  // Both effects at once: 16 ms messages back to back, 40 ms while the ranks compute, half the
  // compute lost per second of a message's back-to-back time. overlap_slowdown was measured
  // against the back-to-back time, so the share of a message that overlaps backward costs that
  // share of its 16 ms, not of the 24 ms it spends waiting for cores. Message 0 leaves at 10 and
  // overlaps backward for a share x of its d ms: it takes c = 0.5 x 16 = 8x of compute (backward
  // ends at 20 + c) and d = 16 + 24x; x d = 10 + c is 24x^2 + 8x - 10 = 0, so x = 0.5: c = 4,
  // d = 28 (10..38), backward ends at 24, and message 1 goes back to back, 38..54. (Charging
  // 0.5 of all the overlapping time, as before, gave c = 0.5 (10 + c) = 10: backward ending at 30.)
  LinearCost cost{0.016, 0.0, 0.0};
  set_measured_curve(cost, {100, 200}, {0.016, 0.016});
  set_busy_curve(cost, {100, 200}, {0.040, 0.040});
  cost.overlap_slowdown = 0.5;
  const std::vector<LayerCost> two = {{0, 0.010, 100}, {0, 0.010, 100}};
  const Prediction p = predict_iteration(two, wfbp_plan(2), cost, 0.0, false);
  EXPECT_NEAR(p.backward_end, 0.024, 1e-9);
  EXPECT_NEAR(p.iteration, 0.054, 1e-9);
}

TEST(CostModel, MgwfbpMergesMoreWhenMessagesCostCompute) {
  // MgwfbpFourLayersByHandAndItsGain's layers (alpha 1, beta 0, tb = [1, 1, 0.5, 0.5]) with
  // gamma = 0.6. WFBP: ready 0.5 (layer 3), sends take 0.6 each: layer 2 ready 1.6, layer 1 3.2,
  // layer 0 4.8; messages 0.5-1.5, 1.6-2.6, 3.2-4.2, 4.8-5.8.
  const std::vector<double> tb = {1, 1, 0.5, 0.5}, bytes = {1, 1, 1, 1};
  const LinearCost cost{1.0, 0.0, 0.6};
  std::vector<LayerCost> layers;
  for (int l = 0; l < 4; ++l) layers.push_back({0.0, tb[l], bytes[l]});
  EXPECT_DOUBLE_EQ(predict_iteration(layers, wfbp_plan(4), cost, 0, false).comm_end, 5.8);
  // The paper's rule alone merges nothing here (every message ends before the next gradient is
  // ready, because the sends delay the gradients). Merging l = 3 into 2 ends the last message at
  // 5.2 instead of 5.8, then [3 2 1] 4.6, then everything in one message after backward (3.0)
  // ends at 4.0: the plan is one message.
  const MergePlan plan = mgwfbp_plan(tb, bytes, cost);
  EXPECT_EQ(plan_str(plan), "[3 2 1 0]");
  EXPECT_DOUBLE_EQ(predict_iteration(layers, plan, cost, 0, false).comm_end, 4.0);
  // gamma = 0 keeps the paper's plan.
  EXPECT_EQ(plan_str(mgwfbp_plan(tb, bytes, LinearCost{1.0, 0.0, 0.0})), "[3 2] [1] [0]");
}

TEST(CostModel, CriticalPathThroughComputeWhenCommunicationIsCheap) {
  // The two-layer case of PredictsBspAndWfbpByHand with 0.1 s messages: layer 0's gradient is
  // ready at 5, its message ends 5.1, update 5.6; the path runs through all the compute.
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};
  const Prediction p = predict_schedule(Schedule::WFBP, layers, LinearCost{0.1, 0.0}, 0.5, 1e9, 1e9);
  EXPECT_DOUBLE_EQ(p.iteration, 5.6);
  EXPECT_EQ(p.critical_path, (std::vector<std::string>{"forward 0", "forward 1", "backward 1",
                                                        "backward 0", "allreduce 1", "update"}));
  // A DAG with two roots and a join: the path starts at the root that finishes later.
  Dag g;
  const int x = g.add("x", 3);
  const int y = g.add("y", 1);
  const int z = g.add("z", 1, {y});
  g.add("join", 0.5, {z, x});
  EXPECT_DOUBLE_EQ(g.critical_length(), 3.5);
  EXPECT_EQ(g.critical_path(), (std::vector<std::string>{"x", "join"}));
}

TEST(CostModel, CdsgdPeriodByHand) {
  // Forward 1 + 1, backward 1 + 2 (5 s of compute), update 0.5; compress 0.5, decode 0.25.
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};
  CdsgdCost c;
  c.compress = 0.5;
  c.decompress = 0.25;
  c.exchange = 3.0;
  c.full_exchange = 10.0;
  // The training thread: global and local step 2 x 0.5 + 5 = 6; compression and decoding run on
  // the communication side (0.5 + 3 + 0.25), hidden behind it. Charged to the training thread
  // they would make it 6.75.
  Prediction p = predict_cdsgd(layers, 0.5, c);
  EXPECT_DOUBLE_EQ(p.iteration, 6.0);
  EXPECT_DOUBLE_EQ(p.backward_end, 6.0);
  EXPECT_DOUBLE_EQ(p.comm_end, 3.5);
  EXPECT_EQ(p.critical_path, (std::vector<std::string>{"apply exchange t-1 + local step", "forward 0", "forward 1",
                                                        "backward 1", "backward 0"}));
  // A slow link: the exchange is the period and the bottleneck.
  c.exchange = 8.0;
  p = predict_cdsgd(layers, 0.5, c);
  EXPECT_DOUBLE_EQ(p.iteration, 8.0);
  EXPECT_EQ(p.critical_path, (std::vector<std::string>{"exchange t (compressed)"}));
  // Slow encoding and decoding, each shorter than the compute: exchange t (3 + 4 + 3) must be
  // decoded before iteration t+1 ends, so two periods hold it and one compute: (10 + 6) / 2.
  c.compress = 3.0;
  c.exchange = 4.0;
  c.decompress = 3.0;
  p = predict_cdsgd(layers, 0.5, c);
  EXPECT_DOUBLE_EQ(p.iteration, 8.0);
  EXPECT_EQ(p.critical_path.front(), "compress t");
  EXPECT_EQ(p.critical_path.back(), "backward 0");
  // k = 2: half the iterations are full precision: max(6, 10, (6 + 10) / 2) = 10; mean (6 + 10) / 2.
  c.compress = 0.5;
  c.exchange = 3.0;
  c.decompress = 0.25;
  c.full_precision_every = 2;
  EXPECT_DOUBLE_EQ(predict_cdsgd(layers, 0.5, c).iteration, 8.0);
  // k = 1: every iteration full precision.
  c.full_precision_every = 1;
  EXPECT_DOUBLE_EQ(predict_cdsgd(layers, 0.5, c).iteration, 10.0);
  c.full_precision_every = -1;
  EXPECT_THROW(predict_cdsgd(layers, 0.5, c), mt::core::Error);
}

TEST(CostModel, DssyncIterationByHand) {
  std::vector<LayerCost> layers = {{1, 2, 2}, {1, 1, 2}};
  DssyncCost d;
  d.in_rack = 1.0;
  d.cross_rack = 5.0;
  d.cross_fraction = 0.25;  // group average: 0.75 x 1 + 0.25 x 5 = 2
  EXPECT_DOUBLE_EQ(d.amortized(), 2.0);
  d.world = 9.0;
  d.world_every = 4;  // (3 x 2 + 9) / 4
  EXPECT_DOUBLE_EQ(d.amortized(), 3.75);
  const Prediction p = predict_dssync(layers, 0.5, d);
  EXPECT_DOUBLE_EQ(p.iteration, 5.0 + 0.5 + 3.75);
  EXPECT_EQ(p.critical_path.back(), "group average (parameters + buffers)");
  EXPECT_EQ(p.critical_path.size(), 6u);  // nothing overlaps: every task is on the path
}

TEST(CostModel, DssyncCrossFraction) {
  // 8 ranks, pairs, racks of 2: 3 butterfly phases, 1 inside a rack -> 2/3 cross.
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 2, false, 1), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 4, false, 1), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(16, 4, 4, false, 1), 0.5);
  // Rack-aware: crossing phases only every cross_period iterations.
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 2, true, 4), 0.25);
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 2, true, 1), 1.0);
  // One rack (or none): nothing crosses.
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 0, true, 4), 0.0);
  EXPECT_DOUBLE_EQ(dssync_cross_fraction(8, 2, 8, false, 1), 0.0);
  EXPECT_THROW(dssync_cross_fraction(8, 1, 2, false, 1), mt::core::Error);
}

// ---- `mintrain model` end to end ----

namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("mt_test_model_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

const std::string kMlpConfig = std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt";

// Two layers of 1 MB gradients; compressor times given, so nothing is measured.
std::string write_layer_times() {
  const fs::path p = temp_dir() / "layers.json";
  std::ofstream(p) << R"({"model": "hand", "batch_size": 32, "update_seconds": 0.0005,
    "buffer_bytes": 0, "compress_seconds": 0.0002, "decode_seconds": 0.0001,
    "layers": [{"name": "a", "forward": 0.001, "backward": 0.002, "bytes": 1000000},
               {"name": "b", "forward": 0.001, "backward": 0.001, "bytes": 1000000}]})";
  return p.string();
}

std::string run_model(const std::vector<std::string>& args) {
  std::ostringstream out;
  EXPECT_EQ(mt::apps::run_model_command(args, out), 0);
  return out.str();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ModelCommand, PredictionsFromLayerTimesByHand) {
  const mt::dist::ModelProfile prof = mt::dist::read_profile(write_layer_times());
  ASSERT_EQ(prof.layers.size(), 2u);
  EXPECT_EQ(prof.layers[1].name, "b");
  EXPECT_DOUBLE_EQ(prof.decode_seconds, 1e-4);
  NetworkSpec spec;
  spec.bandwidth_gbps = 1;
  spec.latency_us = 50;
  const NetworkModel net(spec);
  mt::dist::AlgorithmSettings s;
  s.cdsgd_per_exchange.compress = 2e-4;
  s.cdsgd_per_exchange.decompress = 1e-4;
  s.cdsgd_payload_bytes = 2e6;  // NONE: float32
  // One worker: every algorithm is the plain iteration, 5 ms + 0.5 ms update.
  const auto one = mt::dist::predict_row(prof, net, s, 1);
  for (const auto* p : {&one.bsp, &one.wfbp, &one.fusion, &one.mgwfbp, &one.dssync})
    EXPECT_NEAR(p->iteration, 0.0055, 1e-12);
  // N = 4: T(M) = 300 us + 1.2e-8 M. BSP: 5 ms + T(2e6) = 24.3 ms + 0.5 ms = 29.8 ms.
  const auto four = mt::dist::predict_row(prof, net, s, 4);
  EXPECT_NEAR(four.bsp.iteration, 0.0298, 1e-9);
  // WFBP: layer 1 ready at 3 ms, message 3..15.3 ms; layer 0 ready at 5 ms, waits: 27.6 ms; +0.5.
  EXPECT_NEAR(four.wfbp.iteration, 0.0281, 1e-9);
  // CD-SGD (NONE, allreduce of 2 MB = 24.3 ms > compute 1 + 5 ms, with compress 0.2 and decode
  // 0.1 ms on the communication side): the link.
  EXPECT_NEAR(four.cdsgd.iteration, 0.0243, 1e-9);
  // DS-Sync, pairs: 2 x 50 us + 2 MB / 1.25e8 = 16.1 ms after 5.5 ms of compute.
  EXPECT_NEAR(four.dssync.iteration, 0.0055 + 0.0161, 1e-9);

  const std::string out = run_model({kMlpConfig, "--layer-times", write_layer_times(), "--workers",
                                     "1,4", "--bandwidth-gbps", "1", "--latency-us", "50"});
  EXPECT_TRUE(has(out, "BSP")) << out;
  EXPECT_TRUE(has(out, "DS-Sync")) << out;
  EXPECT_TRUE(has(out, "     5.500 (100%)")) << out;
  EXPECT_TRUE(has(out, "    29.800 ( 18%)")) << out;  // 5.5 / 29.8
  EXPECT_TRUE(has(out, "critical paths at N = 4")) << out;
  EXPECT_TRUE(has(out, "BSP 29.800 ms: forward 0..1 > backward 1..0 > allreduce 0 > update")) << out;
  // dist.algorithm "auto" starts from the same model's order.
  EXPECT_TRUE(has(out, "dist.algorithm \"auto\" at N = 4, best predicted first: ")) << out;
  EXPECT_TRUE(has(out, "ssgd/bsp 29.800 ms")) << out;
  EXPECT_FALSE(has(out, " ps/wfbp ")) << "no servers, no parameter-server candidate\n" << out;
  const std::string with_servers = run_model({kMlpConfig, "--layer-times", write_layer_times(), "--workers", "4",
                                              "--bandwidth-gbps", "1", "--latency-us", "50", "--servers", "2"});
  for (const char* name : {" ps/bsp ", " ps/wfbp ", " ps/staggered ", " bytescheduler/ps "})
    EXPECT_TRUE(has(with_servers, name)) << name << "\n" << with_servers;
}

// The measured curves timed Gloo's flat ring: a hierarchical prediction across racks must not
// take them, but its own formula, pieces included (network_model.h).
TEST(ModelCommand, HierarchicalAcrossRacksKeepsItsFormulaWhereTheRingWasMeasured) {
  const mt::dist::ModelProfile prof = mt::dist::read_profile(write_layer_times());
  NetworkSpec spec;
  spec.bandwidth_gbps = 10;
  spec.latency_us = 10;
  spec.ranks_per_rack = 4;
  spec.inter_bandwidth_gbps = 1;
  spec.inter_latency_us = 100;
  mt::dist::AlgorithmSettings s;
  s.measured_world = 8;
  set_measured_curve(s.measured, {1e3, 1e7}, {1.0, 1.0});  // a ring that takes a second
  const auto ring = mt::dist::predict_row(prof, NetworkModel(spec), s, 8);
  EXPECT_GT(ring.bsp.iteration, 1.0);
  spec.algorithm = AllreduceAlgorithm::Hierarchical;
  const auto hier = mt::dist::predict_row(prof, NetworkModel(spec), s, 8);
  // BSP: 5 ms of compute, then 2 MB in 7 pieces: 260 us + (2.4 + 16) ms / 7 + 6 x 16 ms / 7,
  // then the 0.5 ms update.
  EXPECT_NEAR(hier.bsp.iteration, 0.005 + 260e-6 + 0.0184 / 7 + 6 * 0.016 / 7 + 0.0005, 1e-9);
}

TEST(ModelCommand, ProfilesTheMlpForReal) {
  const std::string saved = (temp_dir() / "mlp_profile.json").string();
  const std::string out = run_model({kMlpConfig, "--profile-iters", "3", "--warmup-iters", "1",
                                     "--workers", "1,2,8", "--at", "8", "--save-profile", saved,
                                     "--bandwidth-gbps", "10", "--latency-us", "5"});
  EXPECT_TRUE(has(out, "profile: 3 iterations after 1 warm-up")) << out;
  EXPECT_TRUE(has(out, "critical paths at N = 8")) << out;
  // The profile: one entry per parameter tensor (what S-SGD sends), in forward order by when
  // each gradient completed: the first linear layer's (64x64 weight, 64 bias) before the
  // second's (64x10, 10); inside a layer the bias's hook fires first in backward, so it comes
  // after the weight.
  const mt::dist::ModelProfile prof = mt::dist::read_profile(saved);
  ASSERT_EQ(prof.layers.size(), 4u);
  double first = 0, second = 0;
  for (size_t l = 0; l < 2; ++l) first += prof.layers[l].bytes;
  for (size_t l = 2; l < 4; ++l) second += prof.layers[l].bytes;
  EXPECT_DOUBLE_EQ(first, 4160 * 4.0);
  EXPECT_DOUBLE_EQ(second, 650 * 4.0);
  EXPECT_GT(prof.backward_total(), 0.0);
  EXPECT_GT(prof.forward_total(), 0.0);
  EXPECT_GT(prof.update_seconds, 0.0);
  EXPECT_GE(prof.compress_seconds, 0.0);
  EXPECT_EQ(prof.iterations, 3);
  // The saved profile predicts the same as the live one.
  const std::string again = run_model({kMlpConfig, "--layer-times", saved, "--workers", "1,2,8",
                                       "--at", "8", "--bandwidth-gbps", "10", "--latency-us", "5"});
  EXPECT_EQ(again.substr(again.find("milliseconds per iteration")), out.substr(out.find("milliseconds per iteration")));
}

// A tied table's earlier uses (the parameter server's split): the profile says which layer's
// backward finishes them; WFBP-PS's prediction sends those bytes with that layer when the split
// is on, BSP-PS never; the parts survive a save and are checked against the layers.
TEST(ModelCommand, TiedParametersEarlyPartsMoveWfbpPsBytes) {
  mt::dist::ModelProfile prof = mt::dist::read_profile(write_layer_times());
  prof.layers[0].backward = 0.05;           // layer a's backward is long: b's pushes can overlap it
  prof.early_parts.push_back({1, 0, 9e5});  // 0.9 MB of layer a's gradient final with layer b
  const auto split = prof.layer_costs_split();
  EXPECT_DOUBLE_EQ(split[0].bytes, 1e5);
  EXPECT_DOUBLE_EQ(split[1].bytes, 1.9e6);
  EXPECT_DOUBLE_EQ(prof.layer_costs()[0].bytes, 1e6);  // S-SGD's view unchanged
  NetworkSpec spec;
  spec.bandwidth_gbps = 1;
  spec.latency_us = 50;
  const NetworkModel net(spec);
  mt::dist::AlgorithmSettings s;
  s.partition_bytes = 1 << 18;
  const auto on = mt::dist::predict_row(prof, net, s, 4);
  s.ps_split_tied = false;
  const auto off = mt::dist::predict_row(prof, net, s, 4);
  EXPECT_LT(on.wfbp_ps.iteration, off.wfbp_ps.iteration - 0.01);
  EXPECT_DOUBLE_EQ(on.bsp_ps.iteration, off.bsp_ps.iteration);
  const PsLinks links = net.ps_links(4, 1);
  EXPECT_DOUBLE_EQ(on.wfbp_ps.iteration,
                   predict_partitioned(split, prof.update_seconds, wfbp_ps(s.partition_bytes), LinearCost{}, links).iteration);

  const std::string path = (temp_dir() / "early_parts.json").string();
  mt::dist::write_profile(prof, path);
  const mt::dist::ModelProfile back = mt::dist::read_profile(path);
  ASSERT_EQ(back.early_parts.size(), 1u);
  EXPECT_EQ(back.early_parts[0].layer, 1u);
  EXPECT_EQ(back.early_parts[0].from, 0u);
  EXPECT_DOUBLE_EQ(back.early_parts[0].bytes, 9e5);
  prof.early_parts[0].bytes = 2e6;  // more than layer a has
  mt::dist::write_profile(prof, path);
  try {
    mt::dist::read_profile(path);
    ADD_FAILURE() << "an early part larger than its layer was accepted";
  } catch (const mt::core::Error& e) {
    EXPECT_TRUE(has(e.what(), "more bytes than its layer has")) << e.what();
  }
}

// Profiled for real: BERT's word embedding is final with the lookup (first in forward order), its
// decoder part with the MLM head, long before.
TEST(ModelCommand, ProfilesBertsTiedEmbeddingInTwoParts) {
  const std::string saved = (temp_dir() / "bert_profile.json").string();
  run_model({std::string(MT_SOURCE_DIR) + "/configs/survey_bert_tiny_synthetic.prototxt", "--set",
             "data.batch_size=2", "--set", "data.text.seq_len=16", "--profile-iters", "2", "--warmup-iters",
             "1", "--workers", "1,4", "--save-profile", saved, "--bandwidth-gbps", "1", "--latency-us", "50"});
  const mt::dist::ModelProfile prof = mt::dist::read_profile(saved);
  ASSERT_EQ(prof.early_parts.size(), 1u);
  const mt::dist::EarlyPart& e = prof.early_parts[0];
  EXPECT_EQ(prof.layers[e.from].name, "bert.embeddings.word_embeddings.weight");
  EXPECT_DOUBLE_EQ(e.bytes, 30522.0 * 128 * 4);
  EXPECT_GT(e.layer, e.from + 10) << prof.layers[e.layer].name << ": the decoder part is final near the end of forward order";
  EXPECT_EQ(prof.layers[e.layer].name.rfind("mlm_head", 0), 0u) << prof.layers[e.layer].name;
}

TEST(ModelCommand, ProfileNamesWithQuotesAndControlCharactersRoundTrip) {
  // The profile's JSON writer escapes them; its reader reads them back unchanged.
  mt::dist::ModelProfile prof;
  prof.model = "say \"hi\"\\ there";
  prof.device = "cpu";
  prof.layers.push_back({"a\nb\tc\x01" "d", 1e-3, 2e-3, 64.0});  // \x01 then d
  const std::string path = (temp_dir() / "escaped_profile.json").string();
  mt::dist::write_profile(prof, path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has(text, "a\\nb\\tc\\u0001d")) << text;  // no raw control character in the file
  const mt::dist::ModelProfile back = mt::dist::read_profile(path);
  EXPECT_EQ(back.model, prof.model);
  ASSERT_EQ(back.layers.size(), 1u);
  EXPECT_EQ(back.layers[0].name, prof.layers[0].name);
}

TEST(ModelCommand, ErrorsNameTheProblem) {
  std::ostringstream out;
  auto message = [&](const std::vector<std::string>& args) -> std::string {
    try {
      mt::apps::run_model_command(args, out);
    } catch (const mt::core::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(has(message({}), "missing CONFIG"));
  EXPECT_TRUE(has(message({kMlpConfig, "--frobnicate"}), "--frobnicate"));
  EXPECT_TRUE(has(message({kMlpConfig, "--workers", "1,x"}), "--workers"));
  EXPECT_TRUE(has(message({kMlpConfig, "--bandwidth-gbps", "0", "--layer-times", write_layer_times()}),
                  "--bandwidth-gbps"));
  const fs::path bad = temp_dir() / "bad.json";
  std::ofstream(bad) << R"({"layers": [{"forward": 1, "backward": 2}]})";
  EXPECT_TRUE(has(message({kMlpConfig, "--layer-times", bad.string()}), "\"bytes\""));
  std::ofstream(bad, std::ios::trunc) << R"({"layers": [)";
  EXPECT_TRUE(has(message({kMlpConfig, "--layer-times", bad.string()}), "invalid JSON"));
}
