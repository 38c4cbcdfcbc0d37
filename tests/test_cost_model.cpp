// The cost model: the T(M) = alpha + beta*M fit, the DAG critical path, and the merge plans
// (FUSION packing, MG-WFBP merging) on cases small enough to compute by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "dist/cost_model.h"

using namespace mt::dist;

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

TEST(CostModel, ScheduleNames) {
  for (auto s : {Schedule::BSP, Schedule::WFBP, Schedule::FUSION, Schedule::MGWFBP})
    EXPECT_EQ(parse_schedule(schedule_name(s)), s);
  try {
    parse_schedule("wfbp2");
    FAIL();
  } catch (const mt::core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MGWFBP"), std::string::npos);
  }
}
