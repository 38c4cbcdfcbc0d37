// Neural-network ops (core/ops/nn.h): finite-difference gradient checks for every op and its
// stride/padding/mode variants, values against naive reference implementations, clear errors
// for bad inputs, and CPU-vs-GPU agreement (skipped without a CUDA device).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/device.h"
#include "core/grad_mode.h"
#include "core/memory_format.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/runtime.h"
#include "support/gradcheck.h"

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::OpFn;

namespace {

// Values spaced 0.05 apart in random order, none of them 0: no ties for max-pooling and no
// kinks for relu within gradcheck's +-1e-3 perturbation.
Tensor distinct_values(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> perm = randperm(n, gen);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(perm[i]) - n / 2.0f + 0.5f) * 0.05f;
  return Tensor::from_vector(v, shape);
}

Tensor labels(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {int64_t(v.size())}); }

// Direct 7-loop convolution, the reference for the im2col + GEMM kernels.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p) {
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = w.shape()[0], KH = w.shape()[2], KW = w.shape()[3];
  const int64_t HO = (H + 2 * p - KH) / s + 1, WO = (W + 2 * p - KW) / s + 1;
  std::vector<float> vx = x.to_vector(), vw = w.to_vector(), out(N * O * HO * WO);
  std::vector<float> vb = b.defined() ? b.to_vector() : std::vector<float>(O, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          double acc = vb[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t ih = oh * s - p + i, iw = ow * s - p + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(vx[((n * C + c) * H + ih) * W + iw]) * vw[((o * C + c) * KH + i) * KW + j];
              }
          out[((n * O + o) * HO + oh) * WO + ow] = static_cast<float>(acc);
        }
  return Tensor::from_vector(out, {N, O, HO, WO});
}

// Runs f forward and backward (against fixed random output weights) on CPU and on the GPU and
// checks that outputs and all input gradients agree.
void expect_gpu_matches_cpu(const OpFn& f, const std::vector<Tensor>& inputs, double atol = 1e-4,
                            double rtol = 1e-3) {
  auto run = [&](Device dev) {
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) {
      Tensor c = t.defined() ? t.detach().clone().to(dev) : t;
      if (c.defined() && c.dtype() == DType::Float32) c.set_requires_grad(true);
      in.push_back(c);
    }
    Tensor out = f(in);
    out.backward(random_tensor(out.shape(), 99).to(dev));
    std::vector<Tensor> res = {out.detach().to(Device::cpu())};
    for (const Tensor& t : in)
      if (t.defined() && t.requires_grad()) res.push_back(t.grad().to(Device::cpu()));
    return res;
  };
  std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(Device::cuda());
  ASSERT_EQ(cpu.size(), gpu.size());
  EXPECT_TRUE(all_close(gpu[0], cpu[0], atol, rtol)) << "forward output";
  for (size_t i = 1; i < cpu.size(); ++i)
    EXPECT_TRUE(all_close(gpu[i], cpu[i], atol, rtol)) << "gradient of differentiable input " << i - 1;
}

}  // namespace

// ---------------------------------------------------------------- relu

TEST(NnRelu, GradAndValues) {
  Tensor x = distinct_values({3, 4, 5}, 1);
  EXPECT_TRUE(gradcheck([](auto& in) { return relu(in[0]); }, {x}));
  Tensor y = relu(Tensor::from_vector(std::vector<float>{-2, -0.5f, 0, 0.5f, 3}, {5}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 0, 0.5f, 3}));
  // Non-contiguous input.
  EXPECT_TRUE(gradcheck([](auto& in) { return relu(in[0].transpose(0, 2)); }, {x}));
}

// ---------------------------------------------------------------- conv2d

TEST(NnConv, GradBasic) {
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2]); },
                        {random_tensor({2, 3, 5, 5}, 1), random_tensor({4, 3, 3, 3}, 2),
                         random_tensor({4}, 3)}));
}

TEST(NnConv, GradStridePadding) {
  Tensor x = random_tensor({2, 2, 7, 6}, 4), w = random_tensor({3, 2, 3, 3}, 5), b = random_tensor({3}, 6);
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2], {2, 1}); }, {x, w, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2], {1, 2}); }, {x, w, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2], {3, 2}); }, {x, w, b}));
}

TEST(NnConv, GradNoBiasPointwiseRectangular) {
  // 1x1 stride 1 (the kernel skips im2col), no bias.
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], Tensor()); },
                        {random_tensor({2, 3, 4, 4}, 7), random_tensor({5, 3, 1, 1}, 8)}));
  // 1x1 with stride 2 goes through im2col.
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2], {2, 0}); },
                        {random_tensor({2, 3, 5, 5}, 9), random_tensor({2, 3, 1, 1}, 10), random_tensor({2}, 11)}));
  // Non-square kernel.
  EXPECT_TRUE(gradcheck([](auto& in) { return conv2d(in[0], in[1], in[2], {1, 1}); },
                        {random_tensor({1, 2, 4, 6}, 12), random_tensor({2, 2, 2, 3}, 13), random_tensor({2}, 14)}));
}

TEST(NnConv, MatchesNaive) {
  struct Case { Shape x, w; int64_t s, p; bool bias; };
  for (const Case& c : {Case{{5, 3, 9, 8}, {4, 3, 3, 3}, 1, 0, true}, Case{{5, 3, 9, 8}, {4, 3, 3, 3}, 2, 1, true},
                        Case{{3, 1, 28, 28}, {6, 1, 5, 5}, 1, 2, true}, Case{{1, 6, 14, 14}, {16, 6, 5, 5}, 1, 0, false},
                        Case{{4, 8, 6, 6}, {3, 8, 1, 1}, 1, 0, true}, Case{{2, 2, 7, 5}, {3, 2, 2, 4}, 3, 2, true}}) {
    Tensor x = random_tensor(c.x, 21), w = random_tensor(c.w, 22);
    Tensor b = c.bias ? random_tensor({c.w[0]}, 23) : Tensor();
    EXPECT_TRUE(all_close(conv2d(x, w, b, {c.s, c.p}), naive_conv2d(x, w, b, c.s, c.p), 1e-4, 1e-4))
        << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " stride " << c.s << " pad " << c.p;
  }
}

// Backward on a LeNet-sized batch (the batch-parallel path with per-thread dW partial sums),
// against gradients of the naive conv computed by hand: loss = sum(y * r).
TEST(NnConv, BackwardMatchesNaiveOnBatch) {
  const int64_t N = 9, C = 3, H = 10, W = 10, O = 4, K = 5, P = 2, HO = 10, WO = 10;
  Tensor x = random_tensor({N, C, H, W}, 31), w = random_tensor({O, C, K, K}, 32), b = random_tensor({O}, 33);
  Tensor r = random_tensor({N, O, HO, WO}, 34);
  Tensor xg = x.clone().set_requires_grad(true), wg = w.clone().set_requires_grad(true),
         bg = b.clone().set_requires_grad(true);
  sum(mul(conv2d(xg, wg, bg, {1, P}), r)).backward();

  std::vector<float> vx = x.to_vector(), vw = w.to_vector(), vr = r.to_vector();
  std::vector<double> gx(vx.size(), 0.0), gw(vw.size(), 0.0), gb(O, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          const double g = vr[((n * O + o) * HO + oh) * WO + ow];
          gb[o] += g;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t ih = oh - P + i, iw = ow - P + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + c) * H + ih) * W + iw, wi = ((o * C + c) * K + i) * K + j;
                gx[xi] += g * vw[wi];
                gw[wi] += g * vx[xi];
              }
        }
  auto to_tensor = [](const std::vector<double>& v, const Shape& s) {
    return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), s);
  };
  EXPECT_TRUE(all_close(xg.grad(), to_tensor(gx, x.shape()), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(wg.grad(), to_tensor(gw, w.shape()), 1e-3, 1e-4));
  EXPECT_TRUE(all_close(bg.grad(), to_tensor(gb, b.shape()), 1e-3, 1e-4));

  // First layer: the data needs no gradient; weight and bias gradients are unchanged.
  Tensor w2 = w.clone().set_requires_grad(true), b2 = b.clone().set_requires_grad(true);
  sum(mul(conv2d(x, w2, b2, {1, P}), r)).backward();
  EXPECT_TRUE(all_close(w2.grad(), wg.grad(), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(b2.grad(), bg.grad(), 1e-5, 1e-5));
  // Frozen weight: only the input gradient is computed.
  Tensor x3 = x.clone().set_requires_grad(true);
  sum(mul(conv2d(x3, w, b, {1, P}), r)).backward();
  EXPECT_TRUE(all_close(x3.grad(), xg.grad(), 1e-5, 1e-5));
}

// The same batch on 1 and 2 threads gives the same gradients up to summation order, and the
// same thread count always gives bit-identical ones.
TEST(NnConv, BackwardDeterministic) {
  Tensor x = random_tensor({16, 3, 12, 12}, 41), w = random_tensor({8, 3, 3, 3}, 42), b = random_tensor({8}, 43);
  auto grads = [&]() {
    Tensor wg = w.clone().set_requires_grad(true), bg = b.clone().set_requires_grad(true);
    sum(conv2d(x, wg, bg, {1, 1})).backward();
    return std::make_pair(wg.grad().to_vector(), bg.grad().to_vector());
  };
  const int before = num_threads();
  set_num_threads(2);
  auto a = grads(), a2 = grads();
  set_num_threads(1);
  auto c = grads();
  set_num_threads(before);
  EXPECT_EQ(a.first, a2.first);
  EXPECT_EQ(a.second, a2.second);
  EXPECT_TRUE(all_close(Tensor::from_vector(a.first, w.shape()), Tensor::from_vector(c.first, w.shape()), 1e-4, 1e-5));
}

TEST(NnConv, BadInputs) {
  Tensor x = random_tensor({2, 3, 8, 8}, 1);
  // Wrong channel count: the message names both numbers.
  try {
    conv2d(x, random_tensor({4, 2, 3, 3}, 2), Tensor());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 channels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conv2d(x, random_tensor({4, 3, 9, 9}, 3), Tensor()), Error);           // kernel > input
  EXPECT_NO_THROW(conv2d(x, random_tensor({4, 3, 9, 9}, 3), Tensor(), {1, 1}));       // fits with padding
  EXPECT_THROW(conv2d(random_tensor({3, 8, 8}, 4), random_tensor({4, 3, 3, 3}, 5), Tensor()), Error);  // 3-d
  EXPECT_THROW(conv2d(x, random_tensor({4, 3, 3, 3}, 6), random_tensor({5}, 7)), Error);  // bias size
  EXPECT_THROW(conv2d(x, random_tensor({4, 3, 3, 3}, 6), Tensor(), {0, 0}), Error);     // stride 0
}

// ---------------------------------------------------------------- pooling

TEST(NnPool, MaxGrad) {
  Tensor x = distinct_values({2, 3, 6, 7}, 51);
  EXPECT_TRUE(gradcheck([](auto& in) { return max_pool2d(in[0], 2, 2); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return max_pool2d(in[0], 3, 2, 1); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return max_pool2d(in[0], 3, 1, 1); }, {x}));  // overlapping
  EXPECT_TRUE(gradcheck([](auto& in) { return max_pool2d(in[0], 2, 3); }, {x}));     // gaps
}

TEST(NnPool, AvgGrad) {
  Tensor x = random_tensor({2, 3, 6, 7}, 52);
  EXPECT_TRUE(gradcheck([](auto& in) { return avg_pool2d(in[0], 2, 2); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return avg_pool2d(in[0], 3, 2, 1); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return avg_pool2d(in[0], 3, 1, 1); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return global_avg_pool2d(in[0]); }, {x}));
}

TEST(NnPool, Values) {
  // 4x4 input 0..15.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = float(i);
  Tensor x = Tensor::from_vector(v, {1, 1, 4, 4});
  EXPECT_EQ(max_pool2d(x, 2, 2).to_vector(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(avg_pool2d(x, 2, 2).to_vector(), (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}));
  // Padding: max ignores it (-inf); avg divides by the in-image count only.
  EXPECT_EQ(max_pool2d(x, 3, 2, 1).to_vector(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(avg_pool2d(x, 3, 2, 1).to_vector(),
            (std::vector<float>{(0 + 1 + 4 + 5) / 4.0f, (1 + 2 + 3 + 5 + 6 + 7) / 6.0f,
                                (4 + 5 + 8 + 9 + 12 + 13) / 6.0f, (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0f}));
  EXPECT_TRUE(all_close(global_avg_pool2d(x), Tensor::from_vector(std::vector<float>{7.5f}, {1, 1})));
  // All-negative input with padding: the maximum is a real pixel, not the padding.
  Tensor neg = Tensor::full({1, 1, 2, 2}, -3.0);
  EXPECT_EQ(max_pool2d(neg, 3, 1, 1).to_vector(), (std::vector<float>(4, -3.0f)));
  // Max-pool backward sends each gradient to its window's maximum.
  Tensor xg = x.clone().set_requires_grad(true);
  sum(max_pool2d(xg, 2, 2)).backward();
  std::vector<float> expect(16, 0.0f);
  expect[5] = expect[7] = expect[13] = expect[15] = 1.0f;
  EXPECT_EQ(xg.grad().to_vector(), expect);
}

TEST(NnPool, MaxMatchesNaive) {
  Tensor x = random_tensor({3, 4, 11, 9}, 53);
  const int64_t H = 11, W = 9;
  struct Case { int64_t k, s, p; };
  // 2/2/0 takes the specialized kernel; odd sizes leave a last row/column uncovered.
  for (const Case& c : {Case{3, 2, 1}, Case{2, 2, 0}, Case{3, 3, 0}, Case{2, 1, 1}, Case{4, 2, 2}}) {
    const int64_t HO = (H + 2 * c.p - c.k) / c.s + 1, WO = (W + 2 * c.p - c.k) / c.s + 1;
    Tensor y = max_pool2d(x, c.k, c.s, c.p);
    ASSERT_EQ(y.shape(), (Shape{3, 4, HO, WO}));
    std::vector<float> vx = x.to_vector(), vy = y.to_vector();
    for (int64_t plane = 0; plane < 12; ++plane)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < c.k; ++i)
            for (int64_t j = 0; j < c.k; ++j) {
              const int64_t ih = oh * c.s - c.p + i, iw = ow * c.s - c.p + j;
              if (ih >= 0 && ih < H && iw >= 0 && iw < W) best = std::max(best, vx[(plane * H + ih) * W + iw]);
            }
          ASSERT_EQ(vy[(plane * HO + oh) * WO + ow], best) << "kernel " << c.k << " stride " << c.s << " pad " << c.p;
        }
  }
}

TEST(NnPool, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<float>{1, nan, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  for (int64_t k : {2, 3}) {
    std::vector<float> y = max_pool2d(x, k, k == 2 ? 2 : 1, 0).to_vector();
    EXPECT_TRUE(std::isnan(y[0])) << "kernel " << k;  // the window holding the NaN
    EXPECT_FALSE(std::isnan(y.back())) << "kernel " << k;
  }
}

TEST(NnPool, BadInputs) {
  Tensor x = random_tensor({1, 2, 4, 4}, 1);
  EXPECT_THROW(max_pool2d(x, 5, 1), Error);      // kernel larger than input
  EXPECT_THROW(avg_pool2d(x, 5, 1), Error);
  EXPECT_THROW(max_pool2d(x, 2, 2, 2), Error);   // padding > kernel / 2
  EXPECT_THROW(max_pool2d(x, 2, 0), Error);      // stride 0
  EXPECT_THROW(max_pool2d(random_tensor({2, 4, 4}, 2), 2, 2), Error);  // not NCHW
  EXPECT_THROW(global_avg_pool2d(random_tensor({2, 4}, 3)), Error);
}

// ---------------------------------------------------------------- batch_norm

TEST(NnBatchNorm, GradTrain) {
  auto bn = [](bool training) {
    return [training](const std::vector<Tensor>& in) {
      const int64_t c = in[0].shape()[1];
      Tensor rm = Tensor::zeros({c}), rv = Tensor::ones({c});
      return batch_norm(in[0], in[1], in[2], rm, rv, training);
    };
  };
  Tensor w = random_tensor({3}, 61, 0.5f, 1.5f), b = random_tensor({3}, 62);
  EXPECT_TRUE(gradcheck(bn(true), {random_tensor({4, 3, 2, 3}, 63), w, b}));
  EXPECT_TRUE(gradcheck(bn(true), {random_tensor({5, 3}, 64), w, b}));  // [N, C]
  // No affine parameters.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor rm, rv;  // no running statistics either
        return batch_norm(in[0], Tensor(), Tensor(), rm, rv, true);
      },
      {random_tensor({3, 2, 2, 2}, 65)}));
}

TEST(NnBatchNorm, GradEval) {
  Tensor rm = random_tensor({3}, 66), rv = random_tensor({3}, 67, 0.5f, 2.0f);
  auto f = [rm, rv](const std::vector<Tensor>& in) {
    Tensor m = rm, v = rv;
    return batch_norm(in[0], in[1], in[2], m, v, false);
  };
  Tensor w = random_tensor({3}, 68, 0.5f, 1.5f), b = random_tensor({3}, 69);
  EXPECT_TRUE(gradcheck(f, {random_tensor({2, 3, 3, 2}, 70), w, b}));
  EXPECT_TRUE(gradcheck(f, {random_tensor({4, 3}, 71), w, b}));
  // Evaluation must not touch the running statistics.
  EXPECT_EQ(rm.to_vector(), random_tensor({3}, 66).to_vector());
}

TEST(NnBatchNorm, RunningStatsAfterOneStep) {
  // Channel 0: 1, 2, 3, 4 (mean 2.5, biased var 1.25, unbiased 5/3); channel 1: 2, 2, 2, 6.
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 2, 2, 3, 2, 4, 6}, {4, 2});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1f, 0.0f);
  EXPECT_TRUE(all_close(rm, Tensor::from_vector(std::vector<float>{0.25f, 0.3f}, {2})));
  EXPECT_TRUE(all_close(rv, Tensor::from_vector(std::vector<float>{0.9f + 0.1f * 5.0f / 3.0f, 0.9f + 0.1f * 4.0f}, {2})));
  const float s0 = 1.0f / std::sqrt(1.25f);
  EXPECT_TRUE(all_close(y.select(1, 0), Tensor::from_vector(std::vector<float>{-1.5f * s0, -0.5f * s0, 0.5f * s0, 1.5f * s0}, {4})));

  // 4-d: every channel normalized to mean 0 / variance 1, then scaled and shifted.
  Tensor x4 = random_tensor({6, 3, 4, 5}, 72, -2.0f, 5.0f);
  Tensor w = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f}, {3});
  Tensor b = Tensor::from_vector(std::vector<float>{0.0f, -1.0f, 3.0f}, {3});
  Tensor m4 = Tensor::zeros({3}), v4 = Tensor::ones({3});
  Tensor y4 = batch_norm(x4, w, b, m4, v4, true, 0.2f);
  Tensor mean_y = mean(y4, {0, 2, 3});
  EXPECT_TRUE(all_close(mean_y, b, 1e-4, 1e-4));
  Tensor mean_x = mean(x4, {0, 2, 3});
  EXPECT_TRUE(all_close(m4, mul(mean_x, 0.2f), 1e-5, 1e-4));
  Tensor centered = sub(x4, mean_x.reshape({1, 3, 1, 1}));
  Tensor unbiased = mul(sum(square(centered), {0, 2, 3}), 1.0f / (6 * 4 * 5 - 1));
  EXPECT_TRUE(all_close(v4, add(mul(unbiased, 0.2f), 0.8f), 1e-5, 1e-4));
}

TEST(NnBatchNorm, EvalUsesRunningStats) {
  Tensor x = random_tensor({2, 2, 3, 3}, 73);
  Tensor rm = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, {2});
  Tensor rv = Tensor::from_vector(std::vector<float>{4.0f, 0.25f}, {2});
  Tensor w = Tensor::from_vector(std::vector<float>{2.0f, 1.0f}, {2});
  Tensor b = Tensor::from_vector(std::vector<float>{0.0f, 1.0f}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1f, 0.0f);
  Tensor expect = add(mul(div(sub(x, rm.reshape({1, 2, 1, 1})), sqrt(rv).reshape({1, 2, 1, 1})),
                          w.reshape({1, 2, 1, 1})),
                      b.reshape({1, 2, 1, 1}));
  EXPECT_TRUE(all_close(y, expect));
  EXPECT_EQ(rm.to_vector(), (std::vector<float>{0.5f, -1.0f}));
}

TEST(NnBatchNorm, BadInputs) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3}), none;
  // One value per channel cannot give a variance in training.
  EXPECT_THROW(batch_norm(random_tensor({1, 3}, 1), Tensor(), Tensor(), rm, rv, true), Error);
  EXPECT_THROW(batch_norm(random_tensor({2, 4, 2, 2}, 2), Tensor(), Tensor(), rm, rv, true), Error);  // C mismatch
  EXPECT_THROW(batch_norm(random_tensor({2, 3, 2}, 3), Tensor(), Tensor(), rm, rv, true), Error);     // 3-d
  EXPECT_THROW(batch_norm(random_tensor({2, 3}, 4), Tensor(), Tensor(), none, none, false), Error);   // eval w/o stats
}

// ---------------------------------------------------------------- fused: batch_norm + relu, add + relu

namespace {
// f's output and the gradients of its float inputs, for a fixed random output gradient.
std::vector<Tensor> output_and_grads(const OpFn& f, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.detach().clone().set_requires_grad(true));
  Tensor out = f(in);
  out.backward(random_tensor(out.shape(), 98));
  std::vector<Tensor> res = {out.detach()};
  for (const Tensor& t : in) res.push_back(t.grad());
  return res;
}

// The fused op against the two ops it replaces: the same floats forward, and the same mask
// backward, so the tolerance is float rounding of the same sums, not an approximation.
void expect_same(const OpFn& fused, const OpFn& two_ops, const std::vector<Tensor>& inputs,
                 const std::string& what) {
  const std::vector<Tensor> a = output_and_grads(fused, inputs), b = output_and_grads(two_ops, inputs);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(all_close(a[0], b[0], 1e-6, 1e-6)) << what << ": output";
  for (size_t i = 1; i < a.size(); ++i)
    EXPECT_TRUE(all_close(a[i], b[i], 1e-6, 1e-5)) << what << ": gradient of input " << i - 1;
}
}  // namespace

TEST(NnBatchNormRelu, SameAsBatchNormThenRelu) {
  for (bool training : {true, false})
    for (bool channels_last : {false, true})
      for (const Shape& shape : {Shape{4, 3, 5, 6}, Shape{9, 3}}) {
        if (channels_last && shape.size() != 4) continue;
        // Running statistics per call, so both paths start from (and update) the same ones.
        auto bn = [=](bool fused) {
          return [=](const std::vector<Tensor>& in) {
            Tensor rm = Tensor::full({3}, 0.2), rv = Tensor::full({3}, 0.7);
            Tensor x = channels_last ? to_channels_last(in[0]) : in[0];
            Tensor w = in.size() > 1 ? in[1] : Tensor(), b = in.size() > 1 ? in[2] : Tensor();
            return fused ? batch_norm_relu(x, w, b, rm, rv, training) : relu(batch_norm(x, w, b, rm, rv, training));
          };
        };
        const std::string what = std::string(training ? "training" : "evaluation") +
                                 (channels_last ? ", channels-last " : ", ") + std::to_string(shape.size()) + "-d";
        // Weights of both signs and a positive bias: some channels mostly clamped, some mostly not.
        Tensor x = random_tensor(shape, 80, -2.0f, 2.0f);
        Tensor w = Tensor::from_vector(std::vector<float>{1.5f, -0.7f, 0.3f}, {3});
        Tensor b = Tensor::from_vector(std::vector<float>{0.1f, 0.5f, -0.4f}, {3});
        expect_same(bn(true), bn(false), {x, w, b}, what);
        expect_same(bn(true), bn(false), {x}, what + ", no affine parameters");
      }
  // The running statistics are updated as by batch_norm.
  Tensor x = random_tensor({6, 3, 4, 4}, 81);
  Tensor rm1 = Tensor::zeros({3}), rv1 = Tensor::ones({3}), rm2 = Tensor::zeros({3}), rv2 = Tensor::ones({3});
  batch_norm_relu(x, Tensor(), Tensor(), rm1, rv1, true, 0.3f);
  batch_norm(x, Tensor(), Tensor(), rm2, rv2, true, 0.3f);
  EXPECT_EQ(rm1.to_vector(), rm2.to_vector());
  EXPECT_EQ(rv1.to_vector(), rv2.to_vector());
}

TEST(NnBatchNormRelu, Grad) {
  // Finite differences across the kink would not be a derivative: these seeds keep every bn(x)
  // at least 0.01 from 0 (checked below), far outside the 1e-3 perturbation's reach.
  Tensor w = random_tensor({3}, 82, 0.5f, 1.5f), b = random_tensor({3}, 83, -0.3f, 0.3f);
  for (const Shape& shape : {Shape{4, 3, 2, 3}, Shape{6, 3}}) {
    Tensor x = random_tensor(shape, 84);
    Tensor rm, rv;
    Tensor pre = batch_norm(x, w, b, rm, rv, true);
    for (float v : pre.to_vector()) ASSERT_GT(std::fabs(v), 0.01f) << "the seed puts a value on the kink";
    auto f = [](const std::vector<Tensor>& in) {
      Tensor m, v;  // no running statistics
      return batch_norm_relu(in[0], in[1], in[2], m, v, true);
    };
    EXPECT_TRUE(gradcheck(f, {x, w, b}));
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) {
      Tensor m, v;
      return batch_norm_relu(to_channels_last(in[0]), in[1], in[2], m, v, true);
    }, {x.dim() == 4 ? x : x.reshape({6, 3, 1, 1}), w, b}));
  }
}

TEST(NnBatchNormRelu, BadInputs) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  EXPECT_THROW(batch_norm_relu(random_tensor({1, 3}, 1), Tensor(), Tensor(), rm, rv, true), Error);
  EXPECT_THROW(batch_norm_relu(random_tensor({2, 4, 2, 2}, 2), Tensor(), Tensor(), rm, rv, true), Error);
}

TEST(NnAddRelu, SameAsAddThenRelu) {
  auto fused = [](const std::vector<Tensor>& in) { return add_relu(in[0], in[1]); };
  auto two_ops = [](const std::vector<Tensor>& in) { return relu(add(in[0], in[1])); };
  Tensor a = random_tensor({2, 4, 3, 5}, 85), b = random_tensor({2, 4, 3, 5}, 86);
  expect_same(fused, two_ops, {a, b}, "contiguous");
  auto cl = [](const OpFn& f) {
    return [f](const std::vector<Tensor>& in) { return f({to_channels_last(in[0]), to_channels_last(in[1])}); };
  };
  expect_same(cl(fused), cl(two_ops), {a, b}, "channels-last");
  // Not fusable, so the two ops: mixed formats, and broadcasting.
  auto mixed = [](const OpFn& f) {
    return [f](const std::vector<Tensor>& in) { return f({to_channels_last(in[0]), in[1]}); };
  };
  expect_same(mixed(fused), mixed(two_ops), {a, b}, "mixed formats");
  expect_same(fused, two_ops, {a, random_tensor({1, 4, 1, 1}, 87)}, "broadcast");
  // The format of a fused result is its inputs'.
  EXPECT_TRUE(is_channels_last(add_relu(to_channels_last(a), to_channels_last(b))));
  // Values at the kink: relu(0) = 0 with gradient 0, as core::relu.
  Tensor y = add_relu(Tensor::from_vector(std::vector<float>{-1, 0.5f, 2}, {3}),
                      Tensor::from_vector(std::vector<float>{0.5f, -0.5f, -1}, {3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 1}));
}

TEST(NnAddRelu, Grad) {
  // a + b at least 0.015 from 0: a's values are odd multiples of 0.025, b lies in [0, 0.01).
  Tensor a = distinct_values({2, 3, 4, 4}, 88), b = random_tensor({2, 3, 4, 4}, 89, 0.0f, 0.01f);
  EXPECT_TRUE(gradcheck([](auto& in) { return add_relu(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& in) { return add_relu(to_channels_last(in[0]), to_channels_last(in[1])); }, {a, b}));
  // The same tensor as both inputs: its gradient is the sum of both.
  EXPECT_TRUE(gradcheck([](auto& in) { return add_relu(in[0], in[0]); }, {a}));
}

// ---------------------------------------------------------------- dropout

TEST(NnDropout, GradWithFixedMask) {
  // Rebuilding the generator from one seed inside f gives every evaluation the same mask.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        Generator gen(77);
        return dropout(in[0], 0.4f, true, gen);
      },
      {random_tensor({3, 5, 7}, 81)}));
}

TEST(NnDropout, Statistics) {
  const float p = 0.3f;
  const int64_t n = 200000;
  Generator gen(5);
  Tensor x = Tensor::ones({n});
  Tensor y = dropout(x, p, true, gen);
  std::vector<float> v = y.to_vector();
  int64_t kept = 0;
  double total = 0.0;
  for (float e : v) {
    if (e != 0.0f) {
      ++kept;
      ASSERT_FLOAT_EQ(e, 1.0f / (1.0f - p));  // survivors are scaled by 1/(1-p)
    }
    total += e;
  }
  EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.01);
  EXPECT_NEAR(total / n, 1.0, 0.02);  // expectation preserved
  // The generator advanced: the next call draws a different mask.
  EXPECT_NE(dropout(x, p, true, gen).to_vector(), v);
}

TEST(NnDropout, MaskIsThePhiloxStreamInOrder) {
  // Value i takes word i % 4 of block (offset + i / 4) of the generator's stream, as the CUDA
  // kernel draws it, however the CPU kernel groups the blocks it computes at once.
  const float p = 0.35f;
  const int64_t n = 4 * 16 * 3 + 7;  // three groups of 16 blocks and part of a fourth
  Generator gen(123);
  gen.reserve(5);  // start at block 5
  Tensor x = random_tensor({n}, 83);
  Tensor y = dropout(x, p, true, gen);
  const std::vector<float> vx = x.to_vector(), vy = y.to_vector();
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    const PhiloxBlock b = philox_block(123, 5 + static_cast<uint64_t>(i / 4));
    const bool keep = u32_to_unit(b.w[i % 4]) >= p;
    ASSERT_EQ(vy[i], keep ? vx[i] * scale : 0.0f) << "value " << i;
  }
  EXPECT_EQ(gen.offset(), 5u + static_cast<uint64_t>((n + 3) / 4));
}

TEST(NnDropout, DeterministicAndModes) {
  Tensor x = random_tensor({64, 300}, 82);
  Generator g1(9), g2(9);
  EXPECT_EQ(dropout(x, 0.5f, true, g1).to_vector(), dropout(x, 0.5f, true, g2).to_vector());
  EXPECT_EQ(g1.offset(), g2.offset());
  // The mask depends on (seed, offset) only, not on the thread count.
  const int before = num_threads();
  set_num_threads(1);
  Generator g3(11);
  std::vector<float> one = dropout(x, 0.5f, true, g3).to_vector();
  set_num_threads(2);
  Generator g4(11);
  std::vector<float> two = dropout(x, 0.5f, true, g4).to_vector();
  set_num_threads(before);
  EXPECT_EQ(one, two);
  // Identity in evaluation and for p == 0; p == 1 drops everything (and its gradient).
  Generator g(1);
  EXPECT_TRUE(dropout(x, 0.5f, false, g).same(x));
  EXPECT_TRUE(dropout(x, 0.0f, true, g).same(x));
  Tensor xg = x.clone().set_requires_grad(true);
  Tensor all = dropout(xg, 1.0f, true, g);
  EXPECT_EQ(all.to_vector(), std::vector<float>(x.numel(), 0.0f));
  sum(all).backward();
  EXPECT_EQ(xg.grad().to_vector(), std::vector<float>(x.numel(), 0.0f));
  EXPECT_THROW(dropout(x, 1.5f, true, g), Error);
}

// ---------------------------------------------------------------- softmax and losses

TEST(NnSoftmax, Grad) {
  Tensor x = random_tensor({3, 5}, 91, -2.0f, 2.0f);
  EXPECT_TRUE(gradcheck([](auto& in) { return softmax(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return log_softmax(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return softmax(in[0], 0); }, {x}));
  Tensor x3 = random_tensor({2, 4, 3}, 92, -2.0f, 2.0f);
  EXPECT_TRUE(gradcheck([](auto& in) { return softmax(in[0], 1); }, {x3}));
  EXPECT_TRUE(gradcheck([](auto& in) { return log_softmax(in[0], 1); }, {x3}));
}

TEST(NnSoftmax, Values) {
  Tensor x = random_tensor({4, 6, 3}, 93, -3.0f, 3.0f);
  for (int64_t dim : {0, 1, 2, -1}) {
    Tensor s = softmax(x, dim);
    EXPECT_TRUE(all_close(sum(s, {dim}), Tensor::ones(sum(s, {dim}).shape()), 1e-5, 1e-5));
    EXPECT_TRUE(all_close(log_softmax(x, dim), log(s), 1e-5, 1e-4));
  }
  // Large logits: no overflow.
  Tensor big = Tensor::from_vector(std::vector<float>{1000, 1001, 1002}, {1, 3});
  Tensor ref = Tensor::from_vector(std::vector<float>{0, 1, 2}, {1, 3});
  EXPECT_TRUE(all_close(softmax(big), softmax(ref)));
  EXPECT_TRUE(all_close(log_softmax(big), log_softmax(ref), 1e-4));
  EXPECT_THROW(softmax(x, 3), Error);
}

TEST(NnLoss, Grad) {
  Tensor x = random_tensor({4, 5}, 94, -2.0f, 2.0f);
  Tensor t = labels({0, 4, 2, 2});
  EXPECT_TRUE(gradcheck([](auto& in) { return cross_entropy(in[0], in[1]); }, {x, t}));
  EXPECT_TRUE(gradcheck([](auto& in) { return nll_loss(log_softmax(in[0]), in[1]); }, {x, t}));
  EXPECT_TRUE(gradcheck([](auto& in) { return nll_loss(in[0], in[1]); }, {x, t}));
}

TEST(NnLoss, Values) {
  Tensor lp = Tensor::from_vector(std::vector<float>{-1, -2, -3, -4, -5, -6}, {2, 3});
  EXPECT_FLOAT_EQ(nll_loss(lp, labels({2, 0})).item(), (3.0f + 4.0f) / 2.0f);
  // Uniform logits: cross entropy is log(K).
  EXPECT_NEAR(cross_entropy(Tensor::zeros({3, 10}), labels({1, 5, 9})).item(), std::log(10.0f), 1e-6);
  // cross_entropy == nll_loss(log_softmax), value and gradient.
  Tensor x = random_tensor({16, 10}, 95, -4.0f, 4.0f);
  Tensor t = labels({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 9, 3, 3, 7, 2});
  Tensor a = x.clone().set_requires_grad(true), b = x.clone().set_requires_grad(true);
  Tensor la = cross_entropy(a, t), lb = nll_loss(log_softmax(b), t);
  EXPECT_NEAR(la.item(), lb.item(), 1e-5);
  la.backward();
  lb.backward();
  EXPECT_TRUE(all_close(a.grad(), b.grad(), 1e-6, 1e-4));
  // Stable for huge logits.
  Tensor big = Tensor::from_vector(std::vector<float>{1000, 0, -1000, 500}, {2, 2});
  const float l = cross_entropy(big, labels({1, 0})).item();
  EXPECT_TRUE(std::isfinite(l));
  EXPECT_NEAR(l, (1000.0f + 1500.0f) / 2.0f, 1e-3);
}

TEST(NnLoss, BadLabels) {
  Tensor x = random_tensor({3, 10}, 96);
  try {
    cross_entropy(x, labels({1, 12, 3}));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("label 12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10 classes"), std::string::npos) << msg;
  }
  EXPECT_THROW(nll_loss(x, labels({1, -1, 3})), Error);
  EXPECT_THROW(nll_loss(x, labels({1, 2})), Error);                                   // count
  EXPECT_THROW(cross_entropy(x, Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})), Error);  // float labels
  EXPECT_THROW(cross_entropy(random_tensor({3}, 1), labels({1, 2, 3})), Error);       // 1-d scores
}

// ---------------------------------------------------------------- cat

TEST(NnCat, GradAndValues) {
  Tensor a = random_tensor({2, 3, 2}, 101), b = random_tensor({2, 1, 2}, 102), c = random_tensor({2, 2, 2}, 103);
  EXPECT_TRUE(gradcheck([](auto& in) { return cat({in[0], in[1], in[2]}, 1); }, {a, b, c}));
  EXPECT_TRUE(gradcheck([](auto& in) { return cat({in[0], in[1]}, 0); }, {a, random_tensor({1, 3, 2}, 104)}));
  EXPECT_TRUE(gradcheck([](auto& in) { return cat({in[0], in[1]}, -1); }, {a, random_tensor({2, 3, 4}, 105)}));
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor y = Tensor::from_vector(std::vector<float>{5, 6}, {2, 1});
  EXPECT_EQ(cat({x, y}, 1).to_vector(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(cat({x, y.transpose(0, 1)}, 0).to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // Only one input needs a gradient.
  Tensor xg = x.clone().set_requires_grad(true);
  sum(mul(cat({y, xg}, 1), Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}))).backward();
  EXPECT_EQ(xg.grad().to_vector(), (std::vector<float>{2, 3, 5, 6}));
}

TEST(NnCat, BadInputs) {
  Tensor x = random_tensor({2, 2}, 1);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(cat({x, random_tensor({3, 3}, 2)}, 0), Error);
  EXPECT_THROW(cat({x, random_tensor({2, 2, 1}, 3)}, 0), Error);
  EXPECT_THROW(cat({x, x}, 2), Error);
}

// ---------------------------------------------------------------- a LeNet-style graph

TEST(NnGraph, LeNetStepTrains) {
  Generator gen(3);
  Tensor x = randn({8, 1, 28, 28}, 0.0f, 1.0f, gen);
  Tensor t = labels({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor w1 = mul(randn({6, 1, 5, 5}, 0, 1, gen), 0.2f).set_requires_grad(true);
  Tensor b1 = Tensor::zeros({6}).set_requires_grad(true);
  Tensor w2 = mul(randn({8, 6 * 14 * 14}, 0, 1, gen), 0.02f).set_requires_grad(true);
  auto loss_of = [&]() {
    Tensor h = max_pool2d(relu(conv2d(x, w1, b1, {1, 2})), 2, 2);
    Tensor logits = matmul(h.flatten(1), w2.transpose(0, 1));
    return cross_entropy(logits, t);
  };
  const float before = loss_of().item();
  for (int step = 0; step < 5; ++step) {
    Tensor loss = loss_of();
    loss.backward();
    NoGradGuard ng;
    for (Tensor* p : {&w1, &b1, &w2}) {
      p->add_(p->grad(), -0.1f);
      p->zero_grad();
    }
  }
  EXPECT_LT(loss_of().item(), before);
}

// ---------------------------------------------------------------- CPU vs GPU

TEST(NnGpu, ReluConvPool) {
  MT_REQUIRE_GPU();
  expect_gpu_matches_cpu([](auto& in) { return relu(in[0]); }, {distinct_values({4, 3, 8, 8}, 1)});
  expect_gpu_matches_cpu([](auto& in) { return conv2d(in[0], in[1], in[2], {1, 2}); },
                         {random_tensor({8, 3, 16, 16}, 2), random_tensor({6, 3, 5, 5}, 3), random_tensor({6}, 4)});
  expect_gpu_matches_cpu([](auto& in) { return conv2d(in[0], in[1], Tensor(), {2, 1}); },
                         {random_tensor({2, 4, 9, 9}, 5), random_tensor({3, 4, 3, 3}, 6)});
  expect_gpu_matches_cpu([](auto& in) { return max_pool2d(in[0], 3, 2, 1); }, {distinct_values({2, 3, 9, 8}, 7)});
  expect_gpu_matches_cpu([](auto& in) { return avg_pool2d(in[0], 3, 2, 1); }, {random_tensor({2, 3, 9, 8}, 8)});
  expect_gpu_matches_cpu([](auto& in) { return global_avg_pool2d(in[0]); }, {random_tensor({2, 3, 9, 8}, 9)});
}

TEST(NnGpu, BatchNormDropout) {
  MT_REQUIRE_GPU();
  for (bool training : {true, false}) {
    auto f = [training](const std::vector<Tensor>& in) {
      Tensor rm = Tensor::zeros({4}, DType::Float32, in[0].device());
      Tensor rv = Tensor::ones({4}, DType::Float32, in[0].device());
      return batch_norm(in[0], in[1], in[2], rm, rv, training);
    };
    expect_gpu_matches_cpu(f, {random_tensor({8, 4, 5, 5}, 10), random_tensor({4}, 11), random_tensor({4}, 12)});
    expect_gpu_matches_cpu(f, {random_tensor({16, 4}, 13), random_tensor({4}, 14), random_tensor({4}, 15)});
  }
  // Counter-based randomness: the same seed gives the same mask on both devices.
  expect_gpu_matches_cpu(
      [](const std::vector<Tensor>& in) {
        Generator gen(21);
        return dropout(in[0], 0.3f, true, gen);
      },
      {random_tensor({33, 65}, 16)});
}

TEST(NnGpu, FusedBatchNormReluAndAddRelu) {
  MT_REQUIRE_GPU();
  for (bool training : {true, false}) {
    auto f = [training](const std::vector<Tensor>& in) {
      Tensor rm = Tensor::zeros({4}, DType::Float32, in[0].device());
      Tensor rv = Tensor::ones({4}, DType::Float32, in[0].device());
      return batch_norm_relu(in[0], in[1], in[2], rm, rv, training);
    };
    expect_gpu_matches_cpu(f, {random_tensor({8, 4, 5, 5}, 18), random_tensor({4}, 19), random_tensor({4}, 20)});
    expect_gpu_matches_cpu(f, {random_tensor({16, 4}, 21), random_tensor({4}, 22), random_tensor({4}, 23)});
  }
  expect_gpu_matches_cpu([](auto& in) { return add_relu(in[0], in[1]); },
                         {random_tensor({4, 3, 8, 8}, 24), random_tensor({4, 3, 8, 8}, 25)});
}

TEST(NnGpu, SoftmaxLossCat) {
  MT_REQUIRE_GPU();
  Tensor x = random_tensor({32, 10}, 17, -3.0f, 3.0f);
  Tensor t = labels({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9});
  expect_gpu_matches_cpu([](auto& in) { return softmax(in[0]); }, {x});
  expect_gpu_matches_cpu([](auto& in) { return log_softmax(in[0], 0); }, {x});
  expect_gpu_matches_cpu([](auto& in) { return nll_loss(log_softmax(in[0]), in[1]); }, {x, t});
  expect_gpu_matches_cpu([](auto& in) { return cross_entropy(in[0], in[1]); }, {x, t});
  expect_gpu_matches_cpu([](auto& in) { return cat({in[0], in[1]}, 1); },
                         {random_tensor({3, 2, 4}, 18), random_tensor({3, 5, 4}, 19)});
}
