// Mixed precision on the CPU (core/precision.h): the bf16/fp16 rounding helpers against values
// worked out by hand and against an independent reference; the emulated matmul, linear and
// conv2d (forward and both backward passes) against float32 ops on pre-rounded inputs, bit for
// bit; their distance from float32; the float32 path untouched (gradient checks); and the
// errors a bad precision or CUDA setting in a config gives.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "apps/config.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/matmul.h"
#include "core/ops/nn.h"
#include "core/precision.h"
#include "support/gradcheck.h"
#include "support/test_helpers.h"

namespace mt {
namespace {

using core::ComputePrecision;
using core::ComputePrecisionGuard;
using core::Tensor;
using testing::contains;
using testing::error_of;
using testing::random_tensor;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Exact equality, bytes included (Inf and -0 compare too).
::testing::AssertionResult identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  }
  return ::testing::AssertionSuccess();
}

// A config that validates (the synthetic MLP), to change one field of.
apps::RunConfig base_config() { return apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt"); }

float bf16(float v) { return core::round_to_bf16(v); }
float fp16(float v) { return core::round_to_fp16(v); }

// ---------------------------------------------------------------- rounding helpers

TEST(Rounding, Bf16HandComputed) {
  EXPECT_EQ(bf16(1.0f), 1.0f);
  EXPECT_EQ(bf16(3.14159265f), 3.140625f);  // 0x40490FDB keeps its upper half 0x4049
  // bf16 keeps 7 fraction bits: at 1 the spacing is 2^-7.
  EXPECT_EQ(bf16(1.0f + 0x1p-8f), 1.0f);                 // halfway, to the even 1.0
  EXPECT_EQ(bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);   // halfway, to the even 1 + 2/128
  EXPECT_EQ(bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // just above halfway: up
  EXPECT_EQ(bf16(-(1.0f + 3 * 0x1p-8f)), -(1.0f + 0x1p-6f));   // symmetric in the sign
  EXPECT_EQ(core::float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(core::float_to_bf16_bits(-2.0f), 0xC000);
  // float32's exponent range: 1e30 stays finite, only the significand is cut.
  EXPECT_EQ(core::float_to_bf16_bits(1e30f), 0x714A);  // 0x7149F2CA: the dropped half rounds up
  EXPECT_EQ(bf16(1e30f), 1.0002555517425873e30f);
  // Overflow: the largest float rounds past bf16's largest finite value (0x7F7F) to Inf.
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(bf16(-std::numeric_limits<float>::max()), -kInf);
  EXPECT_EQ(core::bf16_bits_to_float(0x7F7F), 3.3895313892515355e38f);
  EXPECT_EQ(bf16(3.3895313892515355e38f), 3.3895313892515355e38f);
  // Subnormals: the smallest bf16 subnormal is 2^-133; half of it ties to the even zero,
  // 1.5 of it to the even 2 * 2^-133.
  EXPECT_EQ(bf16(0x1p-133f), 0x1p-133f);
  EXPECT_EQ(bf16(0x1p-134f), 0.0f);
  EXPECT_EQ(bf16(1.5f * 0x1p-133f), 0x1p-132f);
  EXPECT_EQ(bf16(0x1p-130f + 0x1p-149f), 0x1p-130f);
  EXPECT_TRUE(std::isnan(bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(bf16(-0.0f)));
  EXPECT_EQ(bf16(kInf), kInf);
}

TEST(Rounding, Fp16HandComputed) {
  EXPECT_EQ(core::float_to_fp16_bits(1.0f), 0x3C00);
  EXPECT_EQ(core::float_to_fp16_bits(-2.0f), 0xC000);
  EXPECT_EQ(core::float_to_fp16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(core::float_to_fp16_bits(0.1f), 0x2E66);
  EXPECT_EQ(fp16(0.1f), 0.0999755859375f);
  // 10 fraction bits: at 1 the spacing is 2^-10, at 2048 it is 2.
  EXPECT_EQ(fp16(1.0f + 0x1p-11f), 1.0f);               // halfway, to the even 1.0
  EXPECT_EQ(fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f); // halfway, to the even 1 + 2/1024
  EXPECT_EQ(fp16(2049.0f), 2048.0f);
  EXPECT_EQ(fp16(2051.0f), 2052.0f);
  EXPECT_EQ(fp16(2049.5f), 2050.0f);
  // Overflow: 65504 is the largest finite value; 65520 is halfway to the next (2^16, which
  // does not exist) and ties to "even", i.e. Inf.
  EXPECT_EQ(fp16(65504.0f), 65504.0f);
  EXPECT_EQ(fp16(65519.0f), 65504.0f);
  EXPECT_EQ(fp16(65520.0f), kInf);
  EXPECT_EQ(fp16(1e5f), kInf);
  EXPECT_EQ(fp16(-70000.0f), -kInf);
  // Subnormals: multiples of 2^-24 below 2^-14.
  EXPECT_EQ(core::float_to_fp16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(fp16(0x1p-24f), 0x1p-24f);
  EXPECT_EQ(fp16(0x1p-25f), 0.0f);                   // halfway to 2^-24, to the even zero
  EXPECT_EQ(fp16(0x1p-25f * 1.0001f), 0x1p-24f);     // just above halfway
  EXPECT_EQ(fp16(1.5f * 0x1p-24f), 0x1p-23f);        // halfway between 1 and 2 units: 2
  EXPECT_EQ(fp16(0x1p-26f), 0.0f);
  EXPECT_EQ(fp16(1e-8f), 0.0f);
  EXPECT_EQ(fp16(100.0f * 0x1p-24f + 0x1p-26f), 100.0f * 0x1p-24f);
  EXPECT_EQ(fp16(0x1p-14f), 0x1p-14f);                      // the smallest normal
  EXPECT_EQ(fp16(1023.5f * 0x1p-24f), 0x1p-14f);            // halfway from the largest subnormal: up to even
  EXPECT_EQ(fp16(1022.5f * 0x1p-24f), 1022.0f * 0x1p-24f);  // halfway: down to even
  EXPECT_EQ(core::float_to_fp16_bits(1023.0f * 0x1p-24f), 0x03FF);
  EXPECT_EQ(fp16(std::numeric_limits<float>::denorm_min()), 0.0f);
  EXPECT_TRUE(std::signbit(fp16(-1e-9f)));  // rounds to -0
  EXPECT_TRUE(std::isnan(fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fp16(-kInf), -kInf);
}

TEST(Rounding, EveryHalfAndBfloatValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f16 = core::fp16_bits_to_float(h), fb = core::bf16_bits_to_float(h);
    if (!std::isnan(f16)) {
      ASSERT_EQ(core::float_to_fp16_bits(f16), h) << "fp16 bits " << b;
    }
    if (!std::isnan(fb)) {
      ASSERT_EQ(core::float_to_bf16_bits(fb), h) << "bf16 bits " << b;
    }
  }
}

// An independent reference: the nearest multiple of the format's spacing at x, with the
// C library's round-half-to-even (nearbyint in the default rounding mode).
double reference_round(double x, int fraction_bits, int min_exponent, double max_finite) {
  if (x == 0) return x;
  const int e = std::max(static_cast<int>(std::floor(std::log2(std::fabs(x)))), min_exponent);
  const double spacing = std::ldexp(1.0, e - fraction_bits);
  const double r = std::nearbyint(x / spacing) * spacing;
  // Beyond max_finite + half a spacing (the spacing at the top binade) is Inf.
  const double top_spacing = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(max_finite))) - fraction_bits);
  if (std::fabs(x) >= max_finite + top_spacing / 2) return std::copysign(INFINITY, x);
  return r;
}

TEST(Rounding, MatchesAnIndependentReferenceOnRandomValues) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-30, 18);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng)));
    ASSERT_EQ(fp16(x), static_cast<float>(reference_round(x, 10, -14, 65504.0))) << x;
    ASSERT_EQ(bf16(x), static_cast<float>(reference_round(x, 7, -133 + 7, 3.3895313892515355e38))) << x;
  }
#ifdef __FLT16_MANT_DIG__
  // The compiler's own float -> _Float16 conversion (round to nearest even) agrees too.
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 200000; ++i) {
    const float x = core::float_from_bits(bits(rng));
    if (std::isnan(x)) continue;
    ASSERT_EQ(fp16(x), static_cast<float>(static_cast<_Float16>(x))) << x;
  }
#endif
}

TEST(Rounding, TensorCopiesRoundEveryElementOfAView) {
  const Tensor t = Tensor::from_vector(std::vector<float>{1.0f + 0x1p-8f, 70000.0f, 0.1f, -3.0f}, {2, 2});
  const Tensor r = core::round_to_precision(t.transpose(0, 1), ComputePrecision::FP16);
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.to_vector(), (std::vector<float>{1.0f + 0x1p-8f, 0.0999755859375f, kInf, -3.0f}));
  EXPECT_EQ(t.to_vector()[1], 70000.0f) << "the source is untouched";
  Tensor in_place = t.clone();
  core::round_to_precision_(in_place, ComputePrecision::BF16);
  EXPECT_EQ(in_place.to_vector(), (std::vector<float>{1.0f, 70144.0f, bf16(0.1f), -3.0f}));
}

// ---------------------------------------------------------------- the precision setting

TEST(PrecisionSetting, DefaultsToFp32AndGuardsRestore) {
  EXPECT_EQ(core::compute_precision(), ComputePrecision::FP32);
  {
    ComputePrecisionGuard g(ComputePrecision::BF16);
    EXPECT_EQ(core::compute_precision(), ComputePrecision::BF16);
    {
      ComputePrecisionGuard h(ComputePrecision::FP16);
      EXPECT_EQ(core::compute_precision(), ComputePrecision::FP16);
    }
    EXPECT_EQ(core::compute_precision(), ComputePrecision::BF16);
  }
  EXPECT_EQ(core::compute_precision(), ComputePrecision::FP32);
  for (ComputePrecision p : {ComputePrecision::FP32, ComputePrecision::BF16, ComputePrecision::FP16})
    EXPECT_EQ(core::parse_compute_precision(core::compute_precision_name(p)), p);
}

TEST(PrecisionSetting, BadNamesAreClearErrors) {
  for (const char* bad : {"fp8", "FP16", "half", ""}) {
    const std::string msg = error_of([&] { core::parse_compute_precision(bad); });
    EXPECT_TRUE(contains(msg, "RunConfig.precision"));
    EXPECT_TRUE(contains(msg, "\"fp32\", \"bf16\" or \"fp16\""));
    EXPECT_TRUE(contains(msg, std::string("\"") + bad + "\""));
  }
  apps::RunConfig c = base_config();
  c.set_precision("float16");
  const std::string msg = error_of([&] { apps::validate_config(c); });
  EXPECT_TRUE(contains(msg, "precision"));
  EXPECT_TRUE(contains(msg, "float16"));
  EXPECT_TRUE(contains(msg, "bf16"));
}

TEST(PrecisionSetting, CudaFieldsAreValidated) {
  apps::RunConfig c = base_config();
  EXPECT_NO_THROW(apps::validate_config(c));
  c.mutable_cuda()->set_cudnn_workspace_mb(-1);
  EXPECT_TRUE(contains(error_of([&] { apps::validate_config(c); }), "cuda.cudnn_workspace_mb"));
  c.mutable_cuda()->set_cudnn_workspace_mb(0);  // only algorithms without scratch: allowed
  c.mutable_cuda()->set_allow_tf32(true);
  EXPECT_NO_THROW(apps::validate_config(c));
  c.set_precision("bf16");
  EXPECT_NO_THROW(apps::validate_config(c));
}

// ---------------------------------------------------------------- emulated ops

// Runs f under precision p with inputs that require grad, backpropagating `seed`; returns the
// output and the input gradients.
std::vector<Tensor> run_with_grads(ComputePrecision p, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   const std::vector<Tensor>& inputs, const Tensor& seed) {
  ComputePrecisionGuard guard(p);
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.detach().clone().set_requires_grad(true));
  Tensor out = f(in);
  out.backward(seed);
  std::vector<Tensor> r = {out.detach()};
  for (const Tensor& t : in) r.push_back(t.grad());
  return r;
}

Tensor rounded(const Tensor& t, ComputePrecision p) { return core::round_to_precision(t, p); }

// |a - b| summed over elements, relative to |b| summed: a norm-wise relative distance.
double relative_l1(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += std::fabs(double(x[i]) - y[i]);
    den += std::fabs(double(y[i]));
  }
  return num / den;
}

class EmulatedOps : public ::testing::TestWithParam<ComputePrecision> {
 protected:
  ComputePrecision p() const { return GetParam(); }
  // Relative error of one rounded input: 2^-8 for bf16, 2^-11 for fp16 (half a spacing).
  double unit() const { return p() == ComputePrecision::BF16 ? 0x1p-8 : 0x1p-11; }
};

TEST_P(EmulatedOps, MatmulIsTheFloat32ProductOfRoundedInputs) {
  const Tensor a = random_tensor({17, 33}, 1), b = random_tensor({33, 9}, 2), seed = random_tensor({17, 9}, 3);
  const auto mp = run_with_grads(p(), [](auto& v) { return core::matmul(v[0], v[1]); }, {a, b}, seed);

  // Float32 reference on rounded inputs; the backward products round their inputs too:
  // dA = r(dY) r(B)^T, dB = r(A)^T r(dY) (operands made contiguous as the kernel does).
  const Tensor ar = rounded(a, p()), br = rounded(b, p()), gr = rounded(seed, p());
  EXPECT_TRUE(identical(mp[0], core::matmul(ar, br)));
  EXPECT_TRUE(identical(mp[1], core::matmul(gr, br.transpose(0, 1).contiguous())));
  EXPECT_TRUE(identical(mp[2], core::matmul(ar.transpose(0, 1).contiguous(), gr)));

  // Close to float32, but not equal: the error is bounded by the input rounding, relative to
  // the sum of |products| (here about half the sum itself).
  const auto f32 = run_with_grads(ComputePrecision::FP32, [](auto& v) { return core::matmul(v[0], v[1]); }, {a, b}, seed);
  for (size_t i = 0; i < 3; ++i) {
    const double d = relative_l1(mp[i], f32[i]);
    EXPECT_GT(d, 0.0) << "output " << i << " was not rounded";
    EXPECT_LT(d, 8 * unit()) << "output " << i;
  }
}

TEST_P(EmulatedOps, BatchedMatmulAndTransposedViews) {
  const Tensor a = random_tensor({3, 5, 7}, 4), b = random_tensor({3, 5, 6}, 5);
  Tensor out;
  {
    ComputePrecisionGuard g(p());
    out = core::matmul(a.transpose(1, 2), b);  // [3, 7, 6] from a transposed view
  }
  EXPECT_TRUE(identical(out, core::matmul(rounded(a.transpose(1, 2), p()), rounded(b, p()))));
  EXPECT_GT(relative_l1(out, core::matmul(a.transpose(1, 2), b)), 0.0);
}

TEST_P(EmulatedOps, LinearRoundsTheProductNotTheBias) {
  const Tensor x = random_tensor({8, 20}, 6), w = random_tensor({10, 20}, 7), bias = random_tensor({10}, 8),
               seed = random_tensor({8, 10}, 9);
  const auto lp = run_with_grads(p(), [](auto& v) { return core::linear(v[0], v[1], v[2]); }, {x, w, bias}, seed);
  const Tensor xr = rounded(x, p()), wr = rounded(w, p()), gr = rounded(seed, p());
  EXPECT_TRUE(identical(lp[0], core::linear(xr, wr, bias)));
  EXPECT_TRUE(identical(lp[1], core::matmul(gr, wr)));
  EXPECT_TRUE(identical(lp[2], core::matmul(gr.transpose(0, 1).contiguous(), xr)));
  // The bias gradient sums the float32 gradient.
  const auto f32 = run_with_grads(ComputePrecision::FP32, [](auto& v) { return core::linear(v[0], v[1], v[2]); },
                                  {x, w, bias}, seed);
  EXPECT_TRUE(identical(lp[3], f32[3]));
}

TEST_P(EmulatedOps, ConvIsTheFloat32ConvOfRoundedInputsWithRoundedOutputs) {
  struct Case {
    core::Shape x, w;
    core::Conv2dOptions opt;
  };
  for (const Case& c : {Case{{4, 3, 12, 12}, {6, 3, 5, 5}, {1, 2}}, Case{{2, 4, 9, 9}, {3, 4, 3, 3}, {2, 1}},
                        Case{{3, 8, 5, 5}, {4, 8, 1, 1}, {1, 0}}}) {
    const Tensor x = random_tensor(c.x, 10), w = random_tensor(c.w, 11), bias = random_tensor({c.w[0]}, 12);
    const core::Conv2dOptions opt = c.opt;
    auto conv = [opt](auto& v) { return core::conv2d(v[0], v[1], v[2], opt); };
    const Tensor probe = core::conv2d(x, w, bias, opt);
    const Tensor seed = random_tensor(probe.shape(), 13);
    const auto cp = run_with_grads(p(), conv, {x, w, bias}, seed);

    // Reference: float32 convolution (no bias) of the rounded x and w, its output rounded,
    // plus the bias in float32; gradients: float32 backward from the rounded dy, rounded.
    const auto ref = run_with_grads(ComputePrecision::FP32,
                                    [opt](auto& v) { return core::conv2d(v[0], v[1], Tensor(), opt); },
                                    {rounded(x, p()), rounded(w, p())}, rounded(seed, p()));
    Tensor y = rounded(ref[0], p());
    {
      core::NoGradGuard ng;
      const int64_t n = y.shape()[0], o = y.shape()[1], pixels = y.shape()[2] * y.shape()[3];
      float* py = y.data<float>();
      const float* pb = bias.data<float>();
      for (int64_t i = 0; i < n * o; ++i)
        for (int64_t k = 0; k < pixels; ++k) py[i * pixels + k] += pb[i % o];
    }
    EXPECT_TRUE(identical(cp[0], y)) << "forward, x " << core::shape_str(c.x);
    EXPECT_TRUE(identical(cp[1], rounded(ref[1], p()))) << "dx, x " << core::shape_str(c.x);
    EXPECT_TRUE(identical(cp[2], rounded(ref[2], p()))) << "dw, x " << core::shape_str(c.x);
    const auto f32 = run_with_grads(ComputePrecision::FP32, conv, {x, w, bias}, seed);
    EXPECT_TRUE(identical(cp[3], f32[3])) << "the bias gradient is float32's";

    for (size_t i = 0; i < 3; ++i) {
      const double d = relative_l1(cp[i], f32[i]);
      EXPECT_GT(d, 0.0) << "output " << i << " was not rounded";
      EXPECT_LT(d, 8 * unit()) << "output " << i << ", x " << core::shape_str(c.x);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bf16AndFp16, EmulatedOps, ::testing::Values(ComputePrecision::BF16, ComputePrecision::FP16),
                         [](const auto& info) { return std::string(core::compute_precision_name(info.param)); });

TEST(EmulatedOpsRange, Fp16OverflowsWhereBf16DoesNot) {
  const Tensor a = Tensor::from_vector(std::vector<float>{70000.0f, 1.0f}, {1, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{1.0f, 1.0f}, {2, 1});
  {
    ComputePrecisionGuard g(ComputePrecision::FP16);
    EXPECT_EQ(core::matmul(a, b).item(), kInf);  // 70000 has no float16: Inf
  }
  {
    ComputePrecisionGuard g(ComputePrecision::BF16);
    EXPECT_EQ(core::matmul(a, b).item(), 70145.0f);  // 70000 -> 70144 (spacing 512), + 1
  }
  EXPECT_EQ(core::matmul(a, b).item(), 70001.0f);
}

// ---------------------------------------------------------------- float32 is untouched

TEST(Fp32Path, GradientChecksStillPassAfterReducedPrecisionRuns) {
  {
    ComputePrecisionGuard g(ComputePrecision::FP16);
    (void)core::matmul(random_tensor({3, 4}, 20), random_tensor({4, 2}, 21));
  }
  ASSERT_EQ(core::compute_precision(), ComputePrecision::FP32);
  EXPECT_TRUE(testing::gradcheck([](auto& v) { return core::matmul(v[0], v[1]); },
                                 {random_tensor({4, 5}, 22), random_tensor({5, 3}, 23)}));
  EXPECT_TRUE(testing::gradcheck([](auto& v) { return core::matmul(v[0], v[1]); },
                                 {random_tensor({2, 3, 4}, 24), random_tensor({2, 4, 2}, 25)}));
  EXPECT_TRUE(testing::gradcheck([](auto& v) { return core::linear(v[0], v[1], v[2]); },
                                 {random_tensor({3, 6}, 26), random_tensor({4, 6}, 27), random_tensor({4}, 28)}));
  EXPECT_TRUE(testing::gradcheck([](auto& v) { return core::conv2d(v[0], v[1], v[2], {2, 1}); },
                                 {random_tensor({2, 2, 5, 5}, 29), random_tensor({3, 2, 3, 3}, 30),
                                  random_tensor({3}, 31)}));
}

TEST(Fp32Path, ReducedPrecisionWouldFailTheGradientCheck) {
  // The check above can fail: with bf16 products the finite differences (eps 1e-3, below
  // bf16's spacing) no longer match backward.
  ComputePrecisionGuard g(ComputePrecision::BF16);
  EXPECT_FALSE(testing::gradcheck([](auto& v) { return core::matmul(v[0], v[1]); },
                                  {random_tensor({4, 5}, 22), random_tensor({5, 3}, 23)}));
}

}  // namespace
}  // namespace mt
