// The per-op profile (core/op_profile.h): self time (nested scopes subtracted, so entries add
// up without counting anything twice), call counts, kernels recorded through MT_DISPATCH and
// backward nodes through the engine, and nothing recorded while it is off.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "core/op_profile.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "support/gradcheck.h"

using namespace mt::core;

namespace {

std::map<std::string, OpProfileEntry> by_name() {
  std::map<std::string, OpProfileEntry> m;
  for (const auto& e : op_profile()) m[e.name] = e;
  return m;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST(OpProfile, NestedScopesCountSelfTime) {
  reset_op_profile();
  set_op_profiling(true);
  {
    ProfileScope outer("outer");
    sleep_ms(20);
    for (int i = 0; i < 2; ++i) {
      ProfileScope inner("inner");
      sleep_ms(30);
    }
  }
  set_op_profiling(false);
  const auto m = by_name();
  ASSERT_EQ(m.count("outer"), 1u);
  ASSERT_EQ(m.count("inner"), 1u);
  EXPECT_EQ(m.at("inner").calls, 2);
  EXPECT_GE(m.at("inner").seconds, 0.060);
  EXPECT_GE(m.at("outer").seconds, 0.020);
  EXPECT_LT(m.at("outer").seconds, 0.050);  // not the 80 ms the scope lasted: the inner 60 are not its own
  EXPECT_EQ(op_profile().front().name, "inner");  // largest first
}

TEST(OpProfile, RecordsKernelsAndBackwardNodesOnlyWhenOn) {
  Tensor x = mt::testing::random_tensor({2, 3, 8, 8}, 1).set_requires_grad(true);
  Tensor w = mt::testing::random_tensor({4, 3, 3, 3}, 2).set_requires_grad(true);
  reset_op_profile();
  sum(conv2d(x, w, Tensor(), {1, 1})).backward();
  EXPECT_TRUE(op_profile().empty());  // off by default

  set_op_profiling(true);
  sum(relu(conv2d(x, w, Tensor(), {1, 1}))).backward();
  set_op_profiling(false);
  const auto m = by_name();
  for (const char* name : {"conv2d_forward", "conv2d_backward", "relu_forward", "relu_backward", "Conv2dBackward",
                           "ReluBackward"}) {
    ASSERT_EQ(m.count(name), 1u) << name;
    EXPECT_EQ(m.at(name).calls, 1) << name;
  }
}
