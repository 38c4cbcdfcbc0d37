// Mixed precision on the GPU against the CPU emulation (core/precision.h): bf16 and fp16
// matmul, batched matmul, linear and conv2d (forward and both backward passes, through cuDNN
// and through the im2col fallback), and a LeNet-5 training step in bf16. Both devices feed
// their products bit-identical rounded inputs; only the summation order differs (tensor cores
// versus OpenBLAS), which after conv's output rounding can move a value by one 16-bit step.
// Hence per-format tolerances relative to the output's magnitude on these well-scaled inputs
// (uniform in [-1, 1]): bf16 1e-2, fp16 2e-3. Every test starts with MT_REQUIRE_GPU(), so
// without a GPU (or in a CPU-only build) they all skip visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/precision.h"
#include "core/random.h"
#include "layers/models/registry.h"
#include "optim/sgd.h"
#include "support/gradcheck.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/cast.h"
#include "core/kernels/cuda/math_mode.h"
#endif

using namespace mt::core;
using mt::testing::all_close;
using mt::testing::random_tensor;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

double tolerance(ComputePrecision p) { return p == ComputePrecision::BF16 ? 1e-2 : 2e-3; }

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// actual vs expected within tol relative to each element and to the largest |expected|
// (elements near zero are sums that cancelled: their relative error means nothing).
::testing::AssertionResult close_at_scale(const Tensor& actual, const Tensor& expected, double tol) {
  const double scale = std::max(max_abs(expected), 1e-30);
  return all_close(actual, expected, tol * scale, tol);
}

// Runs f under precision p on each device, backpropagating a fixed random gradient; compares the
// output and every input gradient.
void expect_match(ComputePrecision p, const OpFn& f, const std::vector<Tensor>& inputs, const std::string& what) {
  ComputePrecisionGuard guard(p);
  auto run = [&](Device dev) {
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) {
      Tensor c = t.defined() ? t.detach().clone().to(dev) : t;
      if (c.defined()) c.set_requires_grad(true);
      in.push_back(c);
    }
    Tensor out = f(in);
    std::vector<Tensor> res = {out.detach().to(Device::cpu())};
    out.backward(random_tensor(out.shape(), 99).to(dev));
    for (const Tensor& t : in)
      if (t.defined()) res.push_back(t.grad().to(Device::cpu()));
    return res;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(Device::cuda());
  ASSERT_EQ(cpu.size(), gpu.size());
  const double tol = tolerance(p);
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(close_at_scale(gpu[i], cpu[i], tol))
        << what << " in " << compute_precision_name(p) << ": " << (i == 0 ? "output" : "gradient of input " + std::to_string(i - 1));
  }
}

const ComputePrecision kReduced[] = {ComputePrecision::BF16, ComputePrecision::FP16};

}  // namespace

TEST(GpuPrecision, CastKernelsRoundLikeTheCpu) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  // Hand-picked edge values (ties, overflow, subnormals) plus random ones, through a
  // transposed view: the GPU's 16-bit values, widened back, equal the CPU rounding bit for bit.
  std::vector<float> v = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, -70000.0f, 0x1p-25f,
                          1.5f * 0x1p-24f, 1e-8f, 0x1p-134f, 3.4e38f, -0.0f, 0.1f};
  for (float r : random_tensor({52}, 5, -100.0f, 100.0f).to_vector()) v.push_back(r);
  const Tensor host = Tensor::from_vector(v, {8, 8}).transpose(0, 1);
  const Tensor dev = Tensor::from_vector(v, {8, 8}).to(Device::cuda()).transpose(0, 1);
  for (ComputePrecision p : kReduced) {
    const Tensor h = cuda::to_reduced(dev, p);
    EXPECT_EQ(h.dtype(), storage_dtype(p));
    Tensor widened = Tensor::empty({8, 8}, DType::Float32, Device::cuda());
    cuda::from_reduced(h, widened);
    const std::vector<float> got = widened.to_vector(), want = round_to_precision(host, p).to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << compute_precision_name(p) << " element " << i << ": " << got[i] << " vs " << want[i];
    const std::vector<float> rounded = round_to_precision(dev, p).to_vector();
    EXPECT_EQ(std::memcmp(rounded.data(), want.data(), want.size() * sizeof(float)), 0);
  }
#endif
}

TEST(GpuPrecision, MatmulAndLinear) {
  MT_REQUIRE_GPU();
  for (ComputePrecision p : kReduced) {
    expect_match(p, [](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({64, 96}, 1), random_tensor({96, 48}, 2)},
                 "matmul");
    expect_match(p, [](auto& in) { return matmul(in[0].transpose(0, 1), in[1]); },
                 {random_tensor({96, 64}, 3), random_tensor({96, 40}, 4)}, "matmul of a transposed view");
    expect_match(p, [](auto& in) { return matmul(in[0], in[1]); }, {random_tensor({4, 16, 32}, 5), random_tensor({4, 32, 8}, 6)},
                 "batched matmul");
    expect_match(p, [](auto& in) { return matmul(in[0].transpose(1, 2), in[1]); },
                 {random_tensor({3, 24, 10}, 7), random_tensor({3, 24, 12}, 8)}, "batched matmul of a transposed view");
    expect_match(p, [](auto& in) { return linear(in[0], in[1], in[2]); },
                 {random_tensor({32, 120}, 9), random_tensor({84, 120}, 10), random_tensor({84}, 11)}, "linear");
  }
}

TEST(GpuPrecision, MatmulDiffersFromFp32) {
  MT_REQUIRE_GPU();
  // The reduced path is really taken: bf16 products are visibly less exact than float32.
  const Tensor a = random_tensor({64, 256}, 12).to(Device::cuda()), b = random_tensor({256, 32}, 13).to(Device::cuda());
  const Tensor exact = matmul(a.to(Device::cpu()), b.to(Device::cpu()));
  Tensor low;
  {
    ComputePrecisionGuard g(ComputePrecision::BF16);
    low = matmul(a, b).to(Device::cpu());
  }
  EXPECT_FALSE(all_close(low, exact, 1e-5, 1e-5));
  EXPECT_TRUE(close_at_scale(low, exact, 3e-2));
}

namespace {
void conv_cases(ComputePrecision p, const std::string& path) {
  struct Case {
    Shape x, w;
    bool bias;
    Conv2dOptions opt;
  };
  const Case cases[] = {
      {{8, 1, 28, 28}, {6, 1, 5, 5}, true, {1, 2}},     // LeNet's first layer
      {{8, 6, 14, 14}, {16, 6, 5, 5}, true, {1, 0}},    // and its second
      {{2, 8, 9, 9}, {16, 8, 3, 3}, false, {2, 1}},     // stride 2 with padding, odd size
      {{4, 16, 8, 8}, {32, 16, 1, 1}, true, {1, 0}},    // pointwise
      {{2, 16, 16, 16}, {16, 16, 3, 3}, false, {1, 1}},
  };
  uint64_t seed = 50;
  for (const Case& c : cases) {
    std::vector<Tensor> in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++)};
    if (c.bias) in.push_back(random_tensor({c.w[0]}, seed++));
    const Conv2dOptions opt = c.opt;
    expect_match(p, [opt](auto& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), opt); }, in,
                 path + " conv2d x " + shape_str(c.x) + " w " + shape_str(c.w));
  }
}
}  // namespace

TEST(GpuPrecision, Conv2dThroughCudnn) {
  MT_REQUIRE_GPU();
  for (ComputePrecision p : kReduced) conv_cases(p, "cuDNN");
}

TEST(GpuPrecision, Conv2dBenchmarkedAlgorithms) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  if (!cuda::built_with_cudnn()) GTEST_SKIP() << "no cuDNN in this build";
  cuda::set_conv_benchmark(true);  // cudnnFind*Ex, within a small workspace limit
  const size_t limit = cuda::conv_workspace_limit();
  cuda::set_conv_workspace_limit(size_t(16) << 20);
  for (ComputePrecision p : kReduced) conv_cases(p, "cuDNN (searched)");
  cuda::set_conv_workspace_limit(limit);
  cuda::set_conv_benchmark(false);
#endif
}

TEST(GpuPrecision, Conv2dWithoutCudnn) {
  MT_REQUIRE_GPU();
#ifdef MT_CUDA_KERNELS
  cuda::set_use_cudnn(false);  // im2col + cuBLAS: the emulation on the GPU
  for (ComputePrecision p : kReduced) conv_cases(p, "im2col");
  cuda::set_use_cudnn(true);
#endif
}

TEST(GpuPrecision, Fp16OverflowIsInfOnBothDevices) {
  MT_REQUIRE_GPU();
  ComputePrecisionGuard g(ComputePrecision::FP16);
  const Tensor a = Tensor::from_vector(std::vector<float>{70000.0f, 1.0f}, {1, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{1.0f, 1.0f}, {2, 1});
  EXPECT_TRUE(std::isinf(matmul(a, b).item()));
  EXPECT_TRUE(std::isinf(matmul(a.to(Device::cuda()), b.to(Device::cuda())).item()));
}

// ---------------------------------------------------------------- a training step

TEST(GpuPrecision, LeNetBf16StepMatchesTheCpuEmulation) {
  MT_REQUIRE_GPU();
  ComputePrecisionGuard guard(ComputePrecision::BF16);
  mt::layers::ModelOptions mo;
  mo.in_channels = 1;
  mo.image_size = 28;
  mo.num_classes = 10;
  Generator g1(5), g2(5);
  auto cpu = mt::layers::build_model("lenet5", mo, g1), gpu = mt::layers::build_model("lenet5", mo, g2);
  gpu->to(Device::cuda());
  cpu->train();
  gpu->train();
  mt::optim::SgdOptions so{0.05, 0.9, 0.0, false, 5e-4, false};
  mt::optim::SGD oc(cpu->parameters(), so), og(gpu->parameters(), so);
  const double tol = tolerance(ComputePrecision::BF16);
  for (int step = 0; step < 2; ++step) {
    const Tensor x = random_tensor({16, 1, 28, 28}, 200 + step);
    Generator lg(300 + step);
    std::vector<int64_t> y(16);
    for (auto& v : y) v = static_cast<int64_t>(lg.below(10));
    const Tensor labels = Tensor::from_vector(y, {16});
    oc.zero_grad();
    og.zero_grad();
    const Tensor lc = cross_entropy(cpu->forward(x), labels);
    const Tensor lgpu = cross_entropy(gpu->forward(x.to(Device::cuda())), labels.to(Device::cuda()));
    EXPECT_NEAR(lgpu.item(), lc.item(), tol * std::max(1.0f, std::abs(lc.item()))) << "step " << step;
    lc.backward();
    lgpu.backward();
    const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      // Gradients sum many rounded products through several layers: twice the op tolerance.
      EXPECT_TRUE(close_at_scale(pg[i].second.grad().to(Device::cpu()), pc[i].second.grad(), 2 * tol))
          << "step " << step << ": gradient of " << pc[i].first;
    }
    oc.step();
    og.step();
  }
  const auto sc = cpu->state_dict(), sg = gpu->state_dict();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i)
    if (sc[i].second.dtype() == DType::Float32) {
      // Weights move by lr * gradient from the same start: they agree much more tightly.
      EXPECT_TRUE(all_close(sg[i].second.to(Device::cpu()), sc[i].second, 1e-3, 1e-3)) << sc[i].first;
    }
}
