// The autograd engine: graph recording, gradient accumulation, the grad-ready hook, no-grad
// scope, retain-graph, and views sharing storage.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/function_node.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "support/gradcheck.h"

using namespace mt::core;
using mt::testing::all_close;

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_EQ(tt.contiguous().to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor row = t.select(0, 1);
  EXPECT_EQ(row.to_vector(), (std::vector<float>{4, 5, 6}));
  Tensor col = t.narrow(1, 1, 2);
  EXPECT_EQ(col.to_vector(), (std::vector<float>{2, 3, 5, 6}));
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.storage(), t.storage());
  EXPECT_THROW(t.view({4, 2}), Error);
  EXPECT_THROW(tt.view({6}), Error);  // non-contiguous: view refuses, reshape copies
  EXPECT_EQ(tt.reshape({6}).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Tensor, DataChecksType) {
  Tensor t = Tensor::zeros({2}, DType::Int64);
  EXPECT_THROW(t.data<float>(), Error);
  EXPECT_NO_THROW(t.data<int64_t>());
  EXPECT_THROW(Tensor::empty({-1}), Error);
}

TEST(Tensor, BroadcastingArithmetic) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30}, {3});
  EXPECT_EQ((a + b).to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor c = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1});
  EXPECT_EQ((a * c).to_vector(), (std::vector<float>{1, 2, 3, 8, 10, 12}));
  EXPECT_THROW(a + Tensor::zeros({2}), Error);
}

TEST(Autograd, ChainAndAccumulation) {
  // y = sum(x * x + 3x) -> dy/dx = 2x + 3; x used twice, so contributions must add.
  Tensor x = Tensor::from_vector(std::vector<float>{1, -2, 3}, {3}).set_requires_grad(true);
  Tensor y = sum(x * x + x * 3.0f);
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{5, -1, 9}));
  // A second backward accumulates into .grad.
  sum(x * 2.0f).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{7, 1, 11}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, NoGradScope) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard ng;
    y = x * 2.0f;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(y.backward(Tensor::ones({2})), Error);
}

TEST(Autograd, RetainGraphOffByDefault) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first one retained the graph
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{4, 4}));
  EXPECT_THROW(y.backward(), Error);  // the second one freed it
}

TEST(Autograd, InPlaceOnParameterNeedsNoGrad) {
  Tensor w = Tensor::ones({2}).set_requires_grad(true);
  EXPECT_THROW(w.fill_(0), Error);
  NoGradGuard ng;
  EXPECT_NO_THROW(w.fill_(0));
}

TEST(Autograd, GradReadyHookFiresOncePerBackwardWhenFinal) {
  // w1 is used twice; its hook must fire once, after both contributions were summed.
  Tensor w1 = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor w2 = Tensor::from_vector(std::vector<float>{3, 4}, {2}).set_requires_grad(true);
  std::vector<std::string> order;
  std::vector<float> seen_w1;
  w1.register_grad_ready_hook([&](Tensor& t) {
    order.push_back("w1");
    seen_w1 = t.grad().to_vector();
  });
  w2.register_grad_ready_hook([&](Tensor&) { order.push_back("w2"); });
  Tensor h = w1 * 2.0f;          // "layer 1"
  Tensor out = (h + w1) * w2;    // "layer 2" uses w1 again and w2
  sum(out).backward();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], "w2");  // the later layer's parameter is final first
  EXPECT_EQ(order[1], "w1");
  EXPECT_EQ(seen_w1, (std::vector<float>{9, 12}));  // 3*w2 summed over both paths
}

TEST(Autograd, ContributionHooksSeeATiedWeightsUsesOneByOne) {
  // w1 is used twice (as a tied embedding is): the later use's contribution arrives first with one
  // still to come, then the earlier use's as the last; the ready hook fires after both.
  Tensor w1 = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad(true);
  Tensor w2 = Tensor::from_vector(std::vector<float>{3, 4}, {2}).set_requires_grad(true);
  std::vector<std::pair<std::vector<float>, int>> parts;
  std::vector<std::string> events;
  w1.register_grad_contribution_hook([&](Tensor&, const Tensor& part, int remaining) {
    parts.emplace_back(part.to_vector(), remaining);
    events.push_back("part");
  });
  w1.register_grad_ready_hook([&](Tensor& t) {
    events.push_back("ready");
    EXPECT_EQ(t.grad().to_vector(), (std::vector<float>{9, 12}));
  });
  for (int pass = 0; pass < 2; ++pass) {  // the hooks fire again on the next backward
    parts.clear();
    events.clear();
    w1.zero_grad();
    Tensor h = w1 * 2.0f;
    sum((h + w1) * w2).backward();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].first, (std::vector<float>{3, 4}));  // the direct use: d/dw1 = w2
    EXPECT_EQ(parts[0].second, 1);
    EXPECT_EQ(parts[1].first, (std::vector<float>{6, 8}));  // through h = 2 * w1
    EXPECT_EQ(parts[1].second, 0);
    EXPECT_EQ(events, (std::vector<std::string>{"part", "part", "ready"}));
  }
  // A leaf used once: one contribution, the last; a leaf as the root of backward gets its own.
  Tensor v = Tensor::from_vector(std::vector<float>{5}, {1}).set_requires_grad(true);
  std::vector<int> seen;
  v.register_grad_contribution_hook([&](Tensor&, const Tensor&, int remaining) { seen.push_back(remaining); });
  sum(v * 3.0f).backward();
  v.backward(Tensor::ones({1}));
  EXPECT_EQ(seen, (std::vector<int>{0, 0}));
  EXPECT_EQ(v.grad().to_vector(), (std::vector<float>{4}));
  EXPECT_THROW((w1 * 2.0f).register_grad_contribution_hook([](Tensor&, const Tensor&, int) {}), Error);
}

TEST(Autograd, HookOrderFollowsReverseLayerOrder) {
  // A 3-layer MLP: parameters become final in reverse layer order (what WFBP relies on).
  Tensor x = mt::testing::random_tensor({4, 5}, 1);
  std::vector<Tensor> ws;
  for (int i = 0; i < 3; ++i) ws.push_back(mt::testing::random_tensor({5, 5}, 10 + i).set_requires_grad(true));
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) ws[i].register_grad_ready_hook([&order, i](Tensor&) { order.push_back(i); });
  Tensor h = x;
  for (auto& w : ws) h = tanh(linear(h, w));
  sum(h).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
}

TEST(Autograd, ViewGradients) {
  EXPECT_TRUE(mt::testing::gradcheck(
      [](const std::vector<Tensor>& in) { return in[0].transpose(0, 1).narrow(0, 1, 2).reshape({-1}) * 2.0f; },
      {mt::testing::random_tensor({3, 4}, 2)}));
  EXPECT_TRUE(mt::testing::gradcheck(
      [](const std::vector<Tensor>& in) { return in[0].select(1, 2) + in[0].select(1, 0); },
      {mt::testing::random_tensor({3, 4}, 3)}));
  EXPECT_TRUE(mt::testing::gradcheck(
      [](const std::vector<Tensor>& in) { return expand(in[0], {3, 4}) * in[1]; },
      {mt::testing::random_tensor({3, 1}, 4), mt::testing::random_tensor({3, 4}, 5)}));
}

TEST(Gradcheck, CatchesAWrongBackward) {
  // The checker itself must be able to fail: an op whose backward is off by a factor of 2.
  auto wrong_square = [](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard ng;
      out = square(in[0]);
    }
    record("WrongSquareBackward", {in[0]}, {out}, [x = in[0].detach()](const Grads& g, const Needs&) -> Grads {
      return {mul(g[0], x)};  // should be 2 x g
    });
    return out;
  };
  EXPECT_FALSE(mt::testing::gradcheck(wrong_square, {mt::testing::random_tensor({5}, 9)}));
}
