// CPU-vs-GPU comparisons of every op group and of whole training steps. Each op runs forward
// and backward on fresh random inputs on both devices; outputs and input gradients must agree
// within per-dtype tolerances (float32: atol 1e-4, rtol 1e-3 unless a test says why it needs
// more; integer outputs and dropout masks: exactly). Every test starts with MT_REQUIRE_GPU(),
// so on a machine without a GPU, or in a CPU-only build, they all skip visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "layers/models/registry.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/math_mode.h"
#endif

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::random_tensor;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Tol {
  double atol = 1e-4;
  double rtol = 1e-3;
};

Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(gen.below(classes));
  return Tensor::from_vector(v, {n});
}

// Distinct values (no ties), so max pooling and argmax pick the same element on both devices.
Tensor distinct_values(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  const int64_t n = shape_numel(shape);
  std::vector<int64_t> perm = randperm(n, gen);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(perm[i]) - n / 2.0f + 0.5f) * 0.05f;
  return Tensor::from_vector(v, shape);
}

// Runs f on copies of `inputs` on each device (float32 inputs require grad), backpropagates a
// fixed random gradient, and compares the output and every input gradient.
void expect_match(const OpFn& f, const std::vector<Tensor>& inputs, Tol tol = {}) {
  auto run = [&](Device dev) {
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) {
      Tensor c = t.defined() ? t.detach().clone().to(dev) : t;
      if (c.defined() && c.dtype() == DType::Float32) c.set_requires_grad(true);
      in.push_back(c);
    }
    Tensor out = f(in);
    std::vector<Tensor> res = {out.detach().to(Device::cpu())};
    if (out.requires_grad()) {
      out.backward(random_tensor(out.shape(), 99).to(dev));
      for (const Tensor& t : in)
        if (t.defined() && t.requires_grad()) res.push_back(t.grad().defined() ? t.grad().to(Device::cpu()) : Tensor());
    }
    return res;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(Device::cuda());
  ASSERT_EQ(cpu.size(), gpu.size());
  if (cpu[0].dtype() != DType::Float32) {
    EXPECT_TRUE(all_close(gpu[0].to(DType::Float32), cpu[0].to(DType::Float32), 0, 0)) << "integer output";
  } else {
    EXPECT_TRUE(all_close(gpu[0], cpu[0], tol.atol, tol.rtol)) << "forward output";
  }
  for (size_t i = 1; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].defined(), gpu[i].defined()) << "gradient " << i - 1;
    if (cpu[i].defined()) {
      EXPECT_TRUE(all_close(gpu[i], cpu[i], tol.atol, tol.rtol)) << "gradient of differentiable input " << i - 1;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- elementwise

TEST(GpuOps, BinaryWithBroadcast) {
  MT_REQUIRE_GPU();
  const Tensor a = random_tensor({4, 1, 5}, 1), b = random_tensor({3, 5}, 2);
  const Tensor pos = random_tensor({3, 5}, 3, 0.5f, 2.0f);
  expect_match([](auto& in) { return add(in[0], in[1]); }, {a, b});
  expect_match([](auto& in) { return sub(in[0], in[1]); }, {a, b});
  expect_match([](auto& in) { return mul(in[0], in[1]); }, {a, b});
  expect_match([](auto& in) { return div(in[0], in[1]); }, {a, pos});
  expect_match([](auto& in) { return add(in[0], in[1]); }, {random_tensor({2, 3, 4}, 4), random_tensor({2, 3, 4}, 5)});
  expect_match([](auto& in) { return mul(in[0], in[1]); }, {random_tensor({6}, 6), random_tensor({2, 3, 6}, 7)});
  // A transposed (non-contiguous) operand goes through the strided path.
  expect_match([](auto& in) { return add(in[0].transpose(0, 1), in[1]); }, {random_tensor({5, 4}, 8), random_tensor({4, 5}, 9)});
  expect_match([](auto& in) { return add(in[0], 0.25f); }, {a});
  expect_match([](auto& in) { return mul(in[0], -3.0f); }, {a});
}

TEST(GpuOps, Unary) {
  MT_REQUIRE_GPU();
  const Tensor x = random_tensor({7, 33}, 10, -2.0f, 2.0f), pos = random_tensor({7, 33}, 11, 0.1f, 3.0f);
  expect_match([](auto& in) { return neg(in[0]); }, {x});
  expect_match([](auto& in) { return exp(in[0]); }, {x});
  expect_match([](auto& in) { return log(in[0]); }, {pos});
  expect_match([](auto& in) { return sqrt(in[0]); }, {pos});
  expect_match([](auto& in) { return abs(in[0]); }, {x});
  expect_match([](auto& in) { return square(in[0]); }, {x});
  expect_match([](auto& in) { return tanh(in[0]); }, {x});
  expect_match([](auto& in) { return sigmoid(in[0]); }, {x});
  expect_match([](auto& in) { return pow(in[0], 2.5f); }, {pos});
  expect_match([](auto& in) { return pow(in[0], -1.0f); }, {pos});
}

TEST(GpuOps, ViewsCopiesFillConvert) {
  MT_REQUIRE_GPU();
  const Tensor x = random_tensor({3, 4, 5}, 12);
  expect_match([](auto& in) { return in[0].transpose(0, 2).contiguous(); }, {x});
  expect_match([](auto& in) { return in[0].narrow(1, 1, 2).contiguous(); }, {x});
  expect_match([](auto& in) { return in[0].select(2, 3).clone(); }, {x});
  expect_match([](auto& in) { return expand(in[0], {2, 3, 4, 5}).contiguous(); }, {random_tensor({3, 1, 5}, 13)});
  expect_match([](auto& in) { return in[0].reshape({5, 12}); }, {x});
  // fill_ and copy_ into a strided view, outside autograd.
  for (double v : {0.0, -2.5}) {
    Tensor c = Tensor::zeros({4, 6}), g = Tensor::zeros({4, 6}, DType::Float32, Device::cuda());
    Tensor cv = c.transpose(0, 1).narrow(0, 1, 3), gv = g.transpose(0, 1).narrow(0, 1, 3);
    cv.fill_(v);
    gv.fill_(v);
    EXPECT_TRUE(all_close(g, c, 0, 0));
    const Tensor src = random_tensor({3, 4}, 14);
    cv.copy_(src);
    gv.copy_(src.to(Device::cuda()));
    EXPECT_TRUE(all_close(g, c, 0, 0));
  }
  // Conversions between every pair of supported dtypes, and integer fills.
  // Values in [0, 250): converting a float outside a target type's range is undefined in C++.
  const Tensor f = random_tensor({17}, 15, 0.0f, 250.0f);
  for (DType a : {DType::Float32, DType::Int64, DType::UInt8})
    for (DType b : {DType::Float32, DType::Int64, DType::UInt8}) {
      const Tensor src = a == DType::UInt8 ? f.to(DType::Int64).to(DType::UInt8) : f.to(a);
      const Tensor on_cpu = src.to(b), on_gpu = src.to(Device::cuda()).to(b).to(Device::cpu());
      EXPECT_TRUE(all_close(on_gpu.to(DType::Float32), on_cpu.to(DType::Float32), 0, 0))
          << dtype_name(a) << " -> " << dtype_name(b);
    }
  for (DType t : {DType::Int64, DType::UInt8}) {
    Tensor g = Tensor::full({5, 3}, 7.0, t, Device::cuda());
    EXPECT_TRUE(all_close(g.to(Device::cpu()).to(DType::Float32), Tensor::full({5, 3}, 7.0), 0, 0));
  }
  // In-place axpy (add_) and scale (mul_), also with a non-contiguous source.
  NoGradGuard no_grad;
  Tensor c = random_tensor({4, 5}, 16), g = c.to(Device::cuda());
  const Tensor other = random_tensor({5, 4}, 17);
  c.add_(other.transpose(0, 1), 0.5f).mul_(-2.0f);
  g.add_(other.to(Device::cuda()).transpose(0, 1), 0.5f).mul_(-2.0f);
  EXPECT_TRUE(all_close(g, c, 1e-6, 1e-6));
}

// ---------------------------------------------------------------- reductions

TEST(GpuOps, Reductions) {
  MT_REQUIRE_GPU();
  const Tensor x = random_tensor({4, 5, 6}, 20);
  expect_match([](auto& in) { return sum(in[0]); }, {x});
  expect_match([](auto& in) { return sum(in[0], {1}); }, {x});
  expect_match([](auto& in) { return sum(in[0], {0, 2}, true); }, {x});
  expect_match([](auto& in) { return mean(in[0], {-1}); }, {x});
  expect_match([](auto& in) { return mean(in[0]); }, {x});
  expect_match([](auto& in) { return sum(in[0].transpose(0, 2), {1}); }, {x});
  // Long runs take the block-per-row kernel.
  expect_match([](auto& in) { return sum(in[0]); }, {random_tensor({300, 301}, 21)}, {1e-3, 1e-4});
  expect_match([](auto& in) { return sum(in[0], {1}); }, {random_tensor({3, 20000}, 22)}, {1e-3, 1e-4});
  for (int64_t d : {0, 1, 2}) expect_match([d](auto& in) { return argmax(in[0], d); }, {distinct_values({4, 5, 6}, 23)});
}

// The layouts sum_dims reads without reordering (kernels/cuda/reduction.cu): rows (reduced dims
// last), columns (reduced dims first or in the middle), each in one pass or cut into chunks whose
// partial sums a second pass adds; and the layouts that are reordered first. Long sums: the
// tolerance is the float32 rounding of the result (both devices sum in double).
TEST(GpuOps, SumLayoutsAndChunking) {
  MT_REQUIRE_GPU();
  const Tol long_sum{1e-3, 1e-4};
  auto sum_over = [](std::vector<int64_t> dims) { return [dims](auto& in) { return sum(in[0], dims); }; };
  // Rows: many short (a warp each), a few of medium length (a block each), few long (chunked).
  expect_match(sum_over({1}), {random_tensor({70000, 3}, 30)});
  expect_match(sum_over({1}), {random_tensor({300, 2000}, 31)}, long_sum);
  expect_match(sum_over({1}), {random_tensor({3, 200001}, 32)}, long_sum);
  // A full sum of a parameter-sized tensor (a gradient's squared norm): one row, chunked.
  expect_match([](auto& in) { return sum(in[0]); }, {random_tensor({3000, 1001}, 33)}, long_sum);
  // Columns: reduced leading dims (a broadcast's gradient), odd sizes, merged neighbours.
  expect_match(sum_over({0}), {random_tensor({64, 33, 40}, 34)});
  expect_match(sum_over({0, 1}), {random_tensor({50, 7, 9}, 35)});
  expect_match(sum_over({0}), {random_tensor({3, 300000}, 36)});  // enough columns to fill the GPU: one pass
  expect_match(sum_over({0}), {random_tensor({20000, 2}, 37)}, long_sum);  // few columns: three passes
  // Columns with kept dims on both sides (reduced middle dims).
  expect_match(sum_over({1}), {random_tensor({5, 301, 7}, 38)});
  expect_match(sum_over({1, 2}), {random_tensor({3, 40, 50, 33}, 39)});
  expect_match(sum_over({1}), {random_tensor({2, 30000, 3}, 40)}, long_sum);
  // Size-1 dims, nothing reduced, an empty reduced dim.
  expect_match(sum_over({1}), {random_tensor({4, 1, 6}, 41)});
  expect_match(sum_over({}), {random_tensor({4, 6}, 42)});
  const Tensor empty_sum = sum(Tensor::zeros({0, 5}, DType::Float32, Device::cuda()), {0}).to(Device::cpu());
  EXPECT_EQ(empty_sum.to_vector(), std::vector<float>(5, 0.0f));
  // Views: an offset into the storage (read in place), strided and expanded ones (reordered).
  expect_match([](auto& in) { return sum(in[0].narrow(0, 1, 30), {0}); }, {random_tensor({32, 17, 5}, 44)});
  expect_match([](auto& in) { return sum(in[0].narrow(1, 2, 9), {0}); }, {random_tensor({32, 17, 5}, 45)});
  expect_match([](auto& in) { return sum(expand(in[0], {6, 40, 9}), {0, 2}); }, {random_tensor({40, 1}, 46)});
  // The gradient of a broadcast add: [batch, seq, hidden] + [seq, hidden] sums over the batch.
  expect_match([](auto& in) { return add(in[0], in[1]); }, {random_tensor({32, 16, 24}, 47), random_tensor({16, 24}, 48)});
}

// ---------------------------------------------------------------- matmul and linear

TEST(GpuOps, MatmulAndLinear) {
  MT_REQUIRE_GPU();
  expect_match([](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({7, 9}, 30), random_tensor({9, 5}, 31)});
  expect_match([](auto& in) { return matmul(in[0].transpose(0, 1), in[1]); }, {random_tensor({9, 7}, 32), random_tensor({9, 5}, 33)});
  expect_match([](auto& in) { return matmul(in[0], in[1].transpose(0, 1)); }, {random_tensor({7, 9}, 34), random_tensor({5, 9}, 35)});
  expect_match([](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({3, 4, 6}, 36), random_tensor({3, 6, 2}, 37)});
  expect_match([](auto& in) { return matmul(in[0].transpose(1, 2), in[1]); }, {random_tensor({3, 6, 4}, 38), random_tensor({3, 6, 2}, 39)});
  expect_match([](auto& in) { return linear(in[0], in[1], in[2]); },
               {random_tensor({8, 20}, 40), random_tensor({10, 20}, 41), random_tensor({10}, 42)});
  expect_match([](auto& in) { return linear(in[0], in[1], Tensor()); }, {random_tensor({8, 20}, 43), random_tensor({10, 20}, 44)});
  // A larger product, where TF32 would show: with it off (the default) results stay FP32-close.
  expect_match([](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({128, 512}, 45), random_tensor({512, 64}, 46)},
               {1e-4, 1e-3});
#ifdef MT_CUDA_KERNELS
  EXPECT_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);  // TF32: 10-bit mantissa inputs, so only ~1e-2 agreement
  expect_match([](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({128, 512}, 45), random_tensor({512, 64}, 46)},
               {5e-2, 5e-2});
  cuda::set_allow_tf32(false);
#endif
}

// ---------------------------------------------------------------- convolution

namespace {
void conv_cases() {
  struct Case {
    Shape x, w;
    bool bias;
    Conv2dOptions opt;
  };
  const Case cases[] = {
      {{8, 3, 16, 16}, {6, 3, 5, 5}, true, {1, 2}},  // LeNet's first layer
      {{2, 4, 9, 9}, {3, 4, 3, 3}, false, {2, 1}},   // stride 2 with padding, odd size
      {{4, 16, 8, 8}, {32, 16, 1, 1}, true, {1, 0}}, // pointwise (no unfolding)
      {{4, 16, 8, 8}, {32, 16, 1, 1}, false, {2, 0}},// ResNet's projection shortcut
      {{2, 16, 32, 32}, {16, 16, 3, 3}, false, {1, 1}},
      {{1, 2, 5, 7}, {4, 2, 5, 7}, true, {1, 0}},    // kernel as large as the input
  };
  uint64_t seed = 50;
  for (const Case& c : cases) {
    std::vector<Tensor> in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++)};
    if (c.bias) in.push_back(random_tensor({c.w[0]}, seed++));
    const Conv2dOptions opt = c.opt;
    expect_match([opt](auto& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), opt); }, in, {2e-4, 1e-3});
  }
}
}  // namespace

TEST(GpuOps, Conv2d) {
  MT_REQUIRE_GPU();
  conv_cases();
}

TEST(GpuOps, Conv2dWithoutCudnn) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  if (!cuda::built_with_cudnn()) GTEST_SKIP() << "no cuDNN in this build: Conv2d already tested im2col";
  cuda::set_use_cudnn(false);  // the im2col + cuBLAS kernels
  conv_cases();
  cuda::set_use_cudnn(true);
#endif
}

TEST(GpuOps, Conv2dBenchmarkedAlgorithms) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  if (!cuda::built_with_cudnn()) GTEST_SKIP() << "no cuDNN in this build";
  cuda::set_conv_benchmark(true);  // cudnnFind*Ex instead of the heuristics
  conv_cases();
  cuda::set_conv_benchmark(false);
#endif
}

// Float32 convolutions stay in float32 unless TF32 is allowed, whichever algorithm cuDNN ranks
// first: 1 + 2^-12 needs 12 mantissa bits and TF32 keeps 10, so a TF32 tensor core would see
// 1.0 and every sum of products below would come out short by its count times 2^-11 (0.07 for
// 144 terms).
TEST(GpuOps, Conv2dFloat32KeepsFullPrecision) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  ASSERT_FALSE(cuda::allow_tf32());
  const float v = 1.0f + 0x1p-12f;
  for (bool benchmark : {false, true}) {
    cuda::set_conv_benchmark(benchmark);
    Tensor x = Tensor::full({4, 16, 12, 12}, v, DType::Float32, Device::cuda()).set_requires_grad(true);
    Tensor w = Tensor::full({32, 16, 3, 3}, v, DType::Float32, Device::cuda()).set_requires_grad(true);
    const Tensor y = conv2d(x, w, Tensor(), {1, 0});
    const double exact = 144.0 * double(v) * double(v);  // each output: 16 x 3 x 3 products
    for (float e : y.to_vector()) ASSERT_NEAR(e, exact, 2e-3) << "forward, benchmark " << benchmark;
    // With v as every output's gradient, dw sums x * v over the 4 x 10 x 10 output positions
    // and dx sums w * v over the 32 channels and the taps that reach the pixel (interior: 9).
    y.backward(Tensor::full(y.shape(), v, DType::Float32, Device::cuda()));
    for (float e : w.grad().to_vector()) ASSERT_NEAR(e, 400.0 * double(v) * double(v), 4e-3) << "dw, benchmark " << benchmark;
    const std::vector<float> gx = x.grad().to_vector();
    ASSERT_NEAR(gx[5 * 12 + 5], 288.0 * double(v) * double(v), 2e-3) << "dx, benchmark " << benchmark;
  }
  cuda::set_conv_benchmark(false);
#endif
}

// ---------------------------------------------------------------- pooling, activation

TEST(GpuOps, PoolingAndRelu) {
  MT_REQUIRE_GPU();
  expect_match([](auto& in) { return relu(in[0]); }, {distinct_values({4, 3, 8, 8}, 60)});
  expect_match([](auto& in) { return max_pool2d(in[0], 2, 2, 0); }, {distinct_values({2, 3, 8, 10}, 61)});
  expect_match([](auto& in) { return max_pool2d(in[0], 3, 2, 1); }, {distinct_values({2, 3, 9, 8}, 62)});
  expect_match([](auto& in) { return max_pool2d(in[0], 3, 1, 1); }, {distinct_values({2, 2, 6, 7}, 63)});  // overlapping
  expect_match([](auto& in) { return avg_pool2d(in[0], 2, 2, 0); }, {random_tensor({2, 3, 8, 8}, 64)});
  expect_match([](auto& in) { return avg_pool2d(in[0], 3, 2, 1); }, {random_tensor({2, 3, 9, 8}, 65)});
  expect_match([](auto& in) { return avg_pool2d(in[0], 3, 1, 1); }, {random_tensor({2, 3, 7, 5}, 66)});
  expect_match([](auto& in) { return global_avg_pool2d(in[0]); }, {random_tensor({4, 16, 8, 8}, 67)});
  // Ties: the gradient must reach the same (first) element of each window on both devices.
  expect_match([](auto& in) { return max_pool2d(in[0], 2, 2, 0); }, {Tensor::ones({1, 2, 4, 6})});
  expect_match([](auto& in) { return max_pool2d(in[0], 3, 2, 1); }, {Tensor::ones({1, 2, 7, 5})});
}

// ---------------------------------------------------------------- batch norm, dropout

TEST(GpuOps, BatchNorm) {
  MT_REQUIRE_GPU();
  for (bool training : {true, false})
    for (const Shape& shape : {Shape{8, 4, 5, 5}, Shape{16, 4}}) {
      // The running statistics are compared too: they are updated in place on each device.
      std::vector<Tensor> running[2];
      int run = 0;
      auto f = [&](const std::vector<Tensor>& in) {
        Tensor rm = Tensor::full({4}, 0.1, DType::Float32, in[0].device());
        Tensor rv = Tensor::full({4}, 1.5, DType::Float32, in[0].device());
        Tensor y = batch_norm(in[0], in[1], in[2], rm, rv, training, 0.1f, 1e-5f);
        running[run++] = {rm, rv};
        return y;
      };
      expect_match(f, {random_tensor(shape, 70, -1.0f, 3.0f), random_tensor({4}, 71), random_tensor({4}, 72)});
      for (int k = 0; k < 2; ++k) EXPECT_TRUE(all_close(running[1][k], running[0][k], 1e-6, 1e-5));
      // Without affine parameters.
      expect_match([&](auto& in) {
        Tensor rm = Tensor::zeros({4}, DType::Float32, in[0].device()), rv = Tensor::ones({4}, DType::Float32, in[0].device());
        return batch_norm(in[0], Tensor(), Tensor(), rm, rv, training);
      }, {random_tensor(shape, 73)});
    }
}

// The per-channel sums over many blocks (kernels/cuda/channel_reduce.cuh, the bias gradient's
// row chunks): shapes with few channels and many elements per channel, where each channel is
// cut into slices (the small shapes above fit one block per channel), against the CPU.
TEST(GpuOps, PerChannelReductionsOverManyBlocks) {
  MT_REQUIRE_GPU();
  for (bool training : {true, false}) {
    expect_match([training](auto& in) {
      Tensor rm = Tensor::zeros({3}, DType::Float32, in[0].device()), rv = Tensor::ones({3}, DType::Float32, in[0].device());
      return batch_norm(in[0], in[1], in[2], rm, rv, training, 0.1f, 1e-5f);
    }, {random_tensor({32, 3, 40, 40}, 74, -1.0f, 3.0f), random_tensor({3}, 75), random_tensor({3}, 76)});
  }
  Conv2dOptions opt;
  opt.padding = 1;
  expect_match([opt](auto& v) { return conv2d(v[0], v[1], v[2], opt); },
               {random_tensor({16, 3, 48, 48}, 77), random_tensor({4, 3, 3, 3}, 78), random_tensor({4}, 79)}, {2e-4, 1e-3});
  // A classifier's bias over a large batch: 3 columns, 20000 rows (sums of 20000 terms: the
  // tolerance is the float32 CPU sum's rounding).
  expect_match([](auto& in) { return linear(in[0], in[1], in[2]); },
               {random_tensor({20000, 8}, 80), random_tensor({3, 8}, 81), random_tensor({3}, 82)}, {1e-3, 1e-3});
}

TEST(GpuOps, DropoutMaskIsIdentical) {
  MT_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33 * 65}, int64_t{100003}}) {
    Generator gc(21), gg(21);
    gc.reserve(5);  // a nonzero counter
    gg.reserve(5);
    const Tensor x = random_tensor({n}, 80, 0.5f, 1.5f);  // nonzero, so y == 0 means dropped
    const Tensor yc = dropout(x, 0.3f, true, gc), yg = dropout(x.to(Device::cuda()), 0.3f, true, gg);
    EXPECT_TRUE(all_close(yg, yc, 0, 0)) << n << " elements";  // same mask, same scaling
    EXPECT_EQ(gc.offset(), gg.offset());
  }
  expect_match([](auto& in) {
    Generator gen(22);
    return dropout(in[0], 0.5f, true, gen);
  }, {random_tensor({33, 65}, 81)});
}

// ---------------------------------------------------------------- softmax, losses, cat

TEST(GpuOps, SoftmaxAndLosses) {
  MT_REQUIRE_GPU();
  const Tensor x = random_tensor({32, 10}, 90, -3.0f, 3.0f);
  const Tensor t = labels(32, 10, 91);
  expect_match([](auto& in) { return softmax(in[0]); }, {x});
  expect_match([](auto& in) { return log_softmax(in[0]); }, {x});
  expect_match([](auto& in) { return softmax(in[0], 0); }, {x});
  expect_match([](auto& in) { return log_softmax(in[0], 1); }, {random_tensor({3, 5, 4}, 92)});
  expect_match([](auto& in) { return softmax(in[0], -1); }, {random_tensor({2, 1000}, 93, -10.0f, 10.0f)});
  expect_match([](auto& in) { return nll_loss(log_softmax(in[0]), in[1]); }, {x, t});
  expect_match([](auto& in) { return cross_entropy(in[0], in[1]); }, {x, t});
  expect_match([](auto& in) { return cross_entropy(in[0], in[1]); }, {random_tensor({300, 1000}, 94), labels(300, 1000, 95)});
}

TEST(GpuOps, BadLabelIsAClearErrorOnTheDevice) {
  MT_REQUIRE_GPU();
  const Tensor x = random_tensor({6, 4}, 96).to(Device::cuda());
  const Tensor t = Tensor::from_vector(std::vector<int64_t>{0, 1, 9, 3, -1, 2}, {6}).to(Device::cuda());
  for (int op = 0; op < 2; ++op) {
    // The forward pass queues the check and does not wait for the device (no copy back there);
    // the error comes with the next read of a value, here the loss.
    Tensor loss;
    EXPECT_NO_THROW(loss = op == 0 ? cross_entropy(x, t) : nll_loss(log_softmax(x), t))
        << "the label check was read in the forward pass (a copy back every step)";
    try {
      (void)loss.item();
      ADD_FAILURE() << "a label out of range was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("label 9 at position 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("4 classes"), std::string::npos) << msg;
    }
  }
  // The device is still usable afterwards.
  EXPECT_TRUE(std::isfinite(cross_entropy(x, Tensor::zeros({6}, DType::Int64, Device::cuda())).item()));
}

TEST(GpuOps, Cat) {
  MT_REQUIRE_GPU();
  expect_match([](auto& in) { return cat({in[0], in[1]}, 1); }, {random_tensor({3, 2, 4}, 100), random_tensor({3, 5, 4}, 101)});
  expect_match([](auto& in) { return cat({in[0], in[1], in[2]}, 0); },
               {random_tensor({1, 3}, 102), random_tensor({4, 3}, 103), random_tensor({2, 3}, 104)});
  expect_match([](auto& in) { return cat({in[0], in[1]}, 2); }, {random_tensor({2, 3, 1}, 105), random_tensor({2, 3, 6}, 106)});
  // An input that needs no gradient is skipped by the backward kernel.
  Tensor a = random_tensor({2, 3}, 107).to(Device::cuda()).set_requires_grad(true);
  Tensor b = random_tensor({2, 2}, 108).to(Device::cuda());
  sum(cat({a, b}, 1)).backward();
  EXPECT_TRUE(all_close(a.grad(), Tensor::ones({2, 3}), 0, 0));
}

// ---------------------------------------------------------------- optimizer

TEST(GpuOps, FusedSgdMatchesCpu) {
  MT_REQUIRE_GPU();
  std::vector<mt::optim::SgdOptions> options;
  options.push_back({0.1, 0.0, 0.0, false, 0.0, false});
  options.push_back({0.1, 0.0, 0.0, false, 0.01, false});
  options.push_back({0.05, 0.9, 0.0, false, 5e-4, false});
  options.push_back({0.05, 0.9, 0.0, true, 5e-4, false});
  options.push_back({0.05, 0.9, 0.1, false, 0.01, true});
  for (const auto& o : options) {
    Tensor pc = random_tensor({37, 11}, 110), pg = pc.to(Device::cuda());
    pc.set_requires_grad(true);
    pg.set_requires_grad(true);
    mt::optim::SGD sc({pc}, o), sg({pg}, o);
    for (int step = 0; step < 3; ++step) {
      const Tensor g = random_tensor({37, 11}, 111 + step);
      pc.set_grad(g);
      pg.set_grad(g.to(Device::cuda()));
      sc.step();
      sg.step();
    }
    EXPECT_TRUE(all_close(pg, pc, 1e-6, 1e-5)) << "momentum " << o.momentum << " nesterov " << o.nesterov
                                               << " decoupled " << o.decoupled_weight_decay;
    const auto st_c = sc.state_dict(), st_g = sg.state_dict();
    ASSERT_EQ(st_c.size(), st_g.size());
    for (size_t i = 0; i < st_c.size(); ++i) EXPECT_TRUE(all_close(st_g[i].second, st_c[i].second, 1e-6, 1e-5));
  }
}

// ---------------------------------------------------------------- whole training steps

namespace {

// A state dict's tensors copied to `device`.
mt::core::StateDict to_device(const mt::core::StateDict& dict, Device device) {
  mt::core::StateDict out;
  for (const auto& [name, t] : dict) out.push_back({name, t.to(device)});
  return out;
}

// Two SGD steps (so the momentum buffers are both created and updated) of the same model on
// both devices: losses, every gradient and finally every parameter and buffer must agree.
// `resync`: the GPU model and optimizer start the second step from the CPU's state, so that
// each step compares one step's arithmetic. A deep batch-norm network at a small batch
// amplifies the first step's rounding differences, carried in the weights, into the second
// step's first-layer gradients (on the H200: one ResNet-20 conv1 element 6% apart).
void expect_training_matches(const std::string& name, int64_t in_channels, int64_t image_size,
                             int64_t batch, Tol tol, bool resync = false) {
  mt::layers::ModelOptions mo;
  mo.in_channels = in_channels;
  mo.image_size = image_size;
  mo.num_classes = 10;
  Generator g1(5), g2(5);
  auto cpu = mt::layers::build_model(name, mo, g1), gpu = mt::layers::build_model(name, mo, g2);
  gpu->to(Device::cuda());
  cpu->train();
  gpu->train();
  mt::optim::SgdOptions so{0.05, 0.9, 0.0, false, 5e-4, false};
  mt::optim::SGD oc(cpu->parameters(), so), og(gpu->parameters(), so);
  for (int step = 0; step < 2; ++step) {
    if (step > 0 && resync) {
      gpu->load_state_dict(to_device(cpu->state_dict(), Device::cuda()));
      og.load_state_dict(to_device(oc.state_dict(), Device::cuda()));
    }
    const Tensor x = random_tensor({batch, in_channels, image_size, image_size}, 200 + step);
    const Tensor y = labels(batch, 10, 300 + step);
    oc.zero_grad();
    og.zero_grad();
    const Tensor lc = cross_entropy(cpu->forward(x), y);
    const Tensor lg = cross_entropy(gpu->forward(x.to(Device::cuda())), y.to(Device::cuda()));
    EXPECT_NEAR(lg.item(), lc.item(), 1e-4 * std::max(1.0f, std::abs(lc.item()))) << name << " step " << step;
    lc.backward();
    lg.backward();
    const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t i = 0; i < pc.size(); ++i)
      EXPECT_TRUE(all_close(pg[i].second.grad(), pc[i].second.grad(), tol.atol, tol.rtol))
          << name << " step " << step << ": gradient of " << pc[i].first;
    oc.step();
    og.step();
  }
  const auto sc = cpu->state_dict(), sg = gpu->state_dict();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i)
    if (sc[i].second.dtype() == DType::Float32) {
      EXPECT_TRUE(all_close(sg[i].second, sc[i].second, tol.atol, tol.rtol)) << name << ": " << sc[i].first;
    }
}

}  // namespace

TEST(GpuTraining, LeNetStepMatchesCpu) {
  MT_REQUIRE_GPU();
  expect_training_matches("lenet5", 1, 28, 16, {1e-4, 1e-3});
}

TEST(GpuTraining, ResNet20StepMatchesCpu) {
  MT_REQUIRE_GPU();
  // Twenty layers of batch norm and convolutions with different summation orders: the
  // differences grow with depth, hence the looser tolerance (and the resync, above).
  expect_training_matches("resnet20", 3, 32, 8, {1e-3, 1e-2}, /*resync=*/true);
}
