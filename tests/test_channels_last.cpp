// Channels-last activations (core/memory_format.h): the format's predicates and copies, the ops
// that keep it (batch norm, ReLU, the add, global average pooling) against the same ops on NCHW,
// their gradient checks on channels-last inputs, and conv2d's choice of output format.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>

#include "core/kernels/cpu/conv.h"
#include "core/memory_format.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "support/gradcheck.h"
#include "support/reference_conv.h"

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::random_tensor;

namespace {

// d(sum(f(x) * r))/dx as the backward pass delivers it, in the format the op gave it (the
// leaf's accumulated .grad is its own copy).
Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& r) {
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  Tensor delivered;
  leaf.register_grad_contribution_hook([&](Tensor&, const Tensor& g, int) { delivered = g; });
  sum(mul(f(leaf), r)).backward();
  return delivered;
}

}  // namespace

TEST(MemoryFormat, StridesAndPredicates) {
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (Shape{60, 1, 15, 3}));
  const Tensor x = random_tensor({2, 3, 4, 5}, 1);
  EXPECT_FALSE(is_channels_last(x));
  const Tensor cl = to_channels_last(x);
  EXPECT_TRUE(is_channels_last(cl));
  EXPECT_TRUE(keeps_channels_last(cl));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.to_vector(), x.to_vector());  // the same values, logically
  // In memory the channels of a pixel are adjacent: element (n=1, c=2, h=3, w=4).
  EXPECT_EQ(cl.data<float>()[1 * 60 + 3 * 15 + 4 * 3 + 2], x.data<float>()[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  EXPECT_TRUE(in_format(cl, true).same(cl));
  EXPECT_TRUE(in_format(x, false).same(x));
  const Tensor back = in_format(cl, false);
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.to_vector(), x.to_vector());
  EXPECT_TRUE(is_channels_last(in_format_of(x, cl)));
  EXPECT_TRUE(is_channels_last(empty_in_format_of(cl)));
  EXPECT_TRUE(empty_in_format_of(x).is_contiguous());
  // One channel (or 1x1 pixels): both orders are the same memory, and the tensor counts as
  // contiguous, so the ops take their plain path.
  EXPECT_FALSE(is_channels_last(empty_channels_last({2, 1, 4, 4})));
  EXPECT_FALSE(is_channels_last(empty_channels_last({2, 8, 1, 1})));
  EXPECT_FALSE(is_channels_last(random_tensor({3, 4}, 2)));
  EXPECT_THROW(to_channels_last(random_tensor({3, 4}, 2)), Error);
}

TEST(MemoryFormat, ToChannelsLastIsDifferentiable) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return mul(to_channels_last(in[0]), 2.0f); },
                        {random_tensor({2, 3, 2, 3}, 3)}));
}

TEST(ChannelsLast, BatchNormMatchesNchwAndKeepsTheFormat) {
  const Tensor x = random_tensor({4, 6, 5, 3}, 10, -2.0f, 3.0f);
  const Tensor w = random_tensor({6}, 11, 0.5f, 1.5f), b = random_tensor({6}, 12);
  const Tensor r = random_tensor({4, 6, 5, 3}, 13);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    Tensor rm_a = random_tensor({6}, 14), rv_a = random_tensor({6}, 15, 0.5f, 2.0f);
    Tensor rm_b = rm_a.clone(), rv_b = rv_a.clone();
    const Tensor y_nchw = batch_norm(x, w, b, rm_a, rv_a, training);
    const Tensor y_cl = batch_norm(to_channels_last(x), w, b, rm_b, rv_b, training);
    EXPECT_TRUE(is_channels_last(y_cl));
    EXPECT_TRUE(all_close(y_cl, y_nchw, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(rm_b, rm_a, 1e-6, 1e-6));  // the running statistics too
    EXPECT_TRUE(all_close(rv_b, rv_a, 1e-6, 1e-6));

    // Gradients of x, weight and bias.
    auto run = [&](bool cl) {
      Tensor wl = w.detach(), bl = b.detach();
      wl.set_requires_grad(true);
      bl.set_requires_grad(true);
      auto f = [&](const Tensor& xl) {
        Tensor rm = random_tensor({6}, 14), rv = random_tensor({6}, 15, 0.5f, 2.0f);
        return batch_norm(xl, wl, bl, rm, rv, training);
      };
      const Tensor gx = grad_of(f, cl ? to_channels_last(x) : x, r);
      return std::vector<Tensor>{gx, wl.grad(), bl.grad()};
    };
    const auto g_nchw = run(false), g_cl = run(true);
    EXPECT_TRUE(is_channels_last(g_cl[0]));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(g_cl[i], g_nchw[i], 1e-4, 1e-4)) << "gradient " << i;
  }
}

TEST(ChannelsLast, BatchNormGradientCheck) {
  Tensor w = random_tensor({3}, 20, 0.5f, 1.5f), b = random_tensor({3}, 21);
  for (bool training : {true, false}) {
    EXPECT_TRUE(gradcheck(
        [training](const std::vector<Tensor>& in) {
          Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
          return batch_norm(to_channels_last(in[0]), in[1], in[2], rm, rv, training);
        },
        {random_tensor({3, 3, 2, 3}, 22), w, b}));
  }
}

TEST(ChannelsLast, ReluAddAndPoolingKeepTheFormat) {
  const Tensor a = random_tensor({2, 5, 3, 4}, 30), b = random_tensor({2, 5, 3, 4}, 31);
  const Tensor acl = to_channels_last(a), bcl = to_channels_last(b);

  const Tensor r = relu(acl);
  EXPECT_TRUE(is_channels_last(r));
  EXPECT_EQ(r.to_vector(), relu(a).to_vector());
  const Tensor s = add(acl, bcl);
  EXPECT_TRUE(is_channels_last(s));
  EXPECT_EQ(s.to_vector(), add(a, b).to_vector());
  // Mixed formats: correct values in a contiguous result.
  const Tensor m = add(acl, b);
  EXPECT_TRUE(m.is_contiguous());
  EXPECT_EQ(m.to_vector(), add(a, b).to_vector());
  EXPECT_TRUE(all_close(global_avg_pool2d(acl), global_avg_pool2d(a), 1e-6, 1e-6));

  // Backward: ReLU's and the add's gradients come out channels-last, and equal NCHW's.
  const Tensor rg = random_tensor({2, 5, 3, 4}, 32);
  auto relu_add = [&](const Tensor& x) { return relu(add(x, x)); };
  const Tensor g_cl = grad_of(relu_add, acl, rg), g_nchw = grad_of(relu_add, a, rg);
  EXPECT_TRUE(is_channels_last(g_cl));
  EXPECT_EQ(g_cl.to_vector(), g_nchw.to_vector());
  const Tensor rp = random_tensor({2, 5}, 33);
  auto pool = [](const Tensor& x) { return global_avg_pool2d(x); };
  const Tensor p_cl = grad_of(pool, acl, rp);
  EXPECT_TRUE(is_channels_last(p_cl));
  EXPECT_TRUE(all_close(p_cl, grad_of(pool, a, rp), 1e-7, 1e-6));

  // Max pooling: 2x2 (LeNet) and overlapping 3x3 stride 2 padded (ResNet's stem), with ties.
  for (auto [k, st, pad] : {std::tuple<int64_t, int64_t, int64_t>{2, 2, 0}, {3, 2, 1}}) {
    SCOPED_TRACE("max_pool2d " + std::to_string(k) + "/" + std::to_string(st) + "/" + std::to_string(pad));
    Tensor x = random_tensor({2, 5, 7, 6}, 36);
    x.data<float>()[0] = x.data<float>()[1] = 0.75f;  // a tie inside one window
    const Tensor y_cl = max_pool2d(to_channels_last(x), k, st, pad), y = max_pool2d(x, k, st, pad);
    EXPECT_TRUE(is_channels_last(y_cl));
    EXPECT_EQ(y_cl.to_vector(), y.to_vector());
    const Tensor rm = random_tensor(y.shape(), 37);
    auto mp = [k = k, st = st, pad = pad](const Tensor& t) { return max_pool2d(t, k, st, pad); };
    const Tensor gm = grad_of(mp, to_channels_last(x), rm);
    EXPECT_TRUE(is_channels_last(gm));
    EXPECT_EQ(gm.to_vector(), grad_of(mp, x, rm).to_vector());  // the same pixels chosen
  }

  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return relu(to_channels_last(in[0])); },
                        {random_tensor({2, 3, 2, 2}, 34)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return global_avg_pool2d(to_channels_last(in[0])); },
      {random_tensor({2, 3, 2, 3}, 35)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(to_channels_last(in[0]), 2, 2); },
                        {random_tensor({2, 3, 4, 4}, 38)}));
}

// conv2d's output is channels-last exactly when oneDNN runs at float32 (the default on the
// CPU); with it a chain conv -> batch norm -> ReLU -> add stays channels-last, and the same
// chain with its convolutions on the reference kernels (NCHW) gives the same values and gradients.
TEST(ChannelsLast, ConvolutionsChooseTheFormatAndAgree) {
  const Tensor x = random_tensor({2, 3, 8, 8}, 40);
  const Tensor w1 = random_tensor({8, 3, 3, 3}, 41, -0.5f, 0.5f), w2 = random_tensor({8, 8, 3, 3}, 42, -0.3f, 0.3f);
  const Tensor r = random_tensor({2, 8, 8, 8}, 43);
  struct Run {
    Tensor out, gx, gw1, gw2;
    bool channels_last;
  };
  auto run = [&](bool reference) {
    auto conv = [&](const Tensor& in, const Tensor& w) {
      return reference ? mt::testing::reference_conv2d(in, w, Tensor(), 1, 1) : conv2d(in, w, Tensor(), {1, 1});
    };
    Tensor xl = x.detach(), a = w1.detach(), b = w2.detach();
    for (Tensor* t : {&xl, &a, &b}) t->set_requires_grad(true);
    Tensor rm, rv;
    const Tensor h = relu(batch_norm(conv(xl, a), Tensor(), Tensor(), rm, rv, true));
    const Tensor out = relu(add(conv(h, b), h));
    sum(mul(out, r)).backward();
    return Run{out, xl.grad(), a.grad(), b.grad(), is_channels_last(h) && is_channels_last(out)};
  };
  const Run ref = run(true);
  EXPECT_FALSE(ref.channels_last);
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: the reference is the only implementation";
  const Run cl = run(false);
  EXPECT_TRUE(cl.channels_last);
  EXPECT_TRUE(all_close(cl.out, ref.out, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(cl.gx, ref.gx, 1e-3, 1e-3));
  EXPECT_TRUE(all_close(cl.gw1, ref.gw1, 1e-3, 1e-3));
  EXPECT_TRUE(all_close(cl.gw2, ref.gw2, 1e-3, 1e-3));
  EXPECT_TRUE(cl.gx.is_contiguous());  // the NCHW input's gradient comes back NCHW
}

TEST(ChannelsLast, ConvGradientCheckOnChannelsLastInput) {
  if (!cpu::conv_has_fast_impl()) GTEST_SKIP() << "built without oneDNN: no channels-last convolution";
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return conv2d(to_channels_last(in[0]), in[1], in[2], {2, 1}); },
      {random_tensor({2, 4, 5, 5}, 50), random_tensor({3, 4, 3, 3}, 51), random_tensor({3}, 52)}));
}
