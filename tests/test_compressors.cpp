// Gradient compressors and error feedback (dist/compress/compressor.h, dist/compress/error_feedback.h,
// dist/compress/gradient_exchange.h): each compressor's round trip and payload size, the error-feedback
// invariant, bad options, and the exchange over real Gloo ranks (allreduce for summable
// payloads, allgather otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/random.h"
#include "dist/compress/compressor.h"
#include "dist/compress/error_feedback.h"
#include "dist/compress/gradient_exchange.h"
#include "support/compression_helpers.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

using namespace mt;
using core::Tensor;

namespace {

using mt::testing::error_of;
using mt::testing::random_vector;
// A short name for the many call sites below (defaults: tau 0.5, TOPK ratio 0.1).
const auto opts = [](const auto&... args) { return mt::testing::compression_options(args...); };

}  // namespace

TEST(Compressors, PayloadBytes) {
  const int64_t n = 100;
  EXPECT_EQ(dist::make_compressor(opts("none"))->payload_bytes(n), 400);
  EXPECT_EQ(dist::make_compressor(opts("fp16"))->payload_bytes(n), 200);
  EXPECT_EQ(dist::make_compressor(opts("two_bit"))->payload_bytes(n), 4 * 7);  // 16 a word
  EXPECT_EQ(dist::make_compressor(opts("sign"))->payload_bytes(n), 4 + 4 * 4);  // scale + 32 a word
  EXPECT_EQ(dist::make_compressor(opts("topk", 0.5, 0.1))->payload_bytes(n), 8 * 10);
  EXPECT_EQ(dist::make_compressor(opts("topk", 0.5, 0.001))->payload_bytes(n), 8);  // at least 1
  for (const auto& name : dist::compressor_names()) {
    auto c = dist::make_compressor(opts(name));
    const Tensor in = random_vector(n, 3);
    const Tensor p = c->compress(in);
    EXPECT_EQ(p.numel(), c->payload_numel(n)) << name;
    EXPECT_EQ(p.dtype(), c->payload_dtype()) << name;
    EXPECT_EQ(c->decompress(p, n).numel(), n) << name;
  }
  EXPECT_TRUE(dist::make_compressor(opts("none"))->summable());
  EXPECT_TRUE(dist::make_compressor(opts("fp16"))->summable());
  EXPECT_FALSE(dist::make_compressor(opts("two_bit"))->summable());
  EXPECT_FALSE(dist::make_compressor(opts("topk"))->summable());
  EXPECT_FALSE(dist::make_compressor(opts("sign"))->summable());
}

TEST(Compressors, NoneIsExact) {
  auto c = dist::make_compressor(opts("none"));
  const Tensor in = random_vector(37, 1);
  EXPECT_EQ(c->decompress(c->compress(in), 37).to_vector(), in.to_vector());
}

TEST(Compressors, Fp16RoundsToNearestEven) {
  auto c = dist::make_compressor(opts("fp16"));
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  const std::vector<float> in = {1.0f, 0.1f, -2.5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f};
  const auto out = c->decompress(c->compress(Tensor::from_vector(in, {6})), 6).to_vector();
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0999755859375f);
  EXPECT_EQ(out[2], -2.5f);
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 1.0f + 4.0f / 2048);
  EXPECT_EQ(out[5], 65504.0f);
  // Subnormal halves (units of 2^-24): 1e-7 is 1.68 units, rounds to 2; 2^-26 (a quarter unit)
  // rounds to 0; beyond the largest half is infinity.
  const std::vector<float> edge = {1e-7f, std::ldexp(1.0f, -26), 70000.0f, -70000.0f};
  const auto e = c->decompress(c->compress(Tensor::from_vector(edge, {4})), 4).to_vector();
  EXPECT_EQ(e[0], std::ldexp(2.0f, -24));
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_TRUE(std::isinf(e[2]) && e[2] > 0);
  EXPECT_TRUE(std::isinf(e[3]) && e[3] < 0);
}

TEST(Compressors, TwoBitThresholds) {
  auto c = dist::make_compressor(opts("two_bit", 0.5));
  std::vector<float> in = {0.5f, 0.49f, -0.5f, -0.7f, 3.0f, 0.0f, -0.1f};
  for (int i = 0; i < 30; ++i) in.push_back(i % 3 == 0 ? 1.0f : (i % 3 == 1 ? -1.0f : 0.2f));
  const int64_t n = static_cast<int64_t>(in.size());
  const auto out = c->decompress(c->compress(Tensor::from_vector(in, {n})), n).to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const float want = in[i] >= 0.5f ? 0.5f : (in[i] <= -0.5f ? -0.5f : 0.0f);
    EXPECT_EQ(out[i], want) << i;
  }
}

TEST(Compressors, SignIsScaledSign) {
  auto c = dist::make_compressor(opts("sign"));
  const Tensor in = random_vector(75, 5);
  const auto v = in.to_vector();
  double l1 = 0;
  for (float x : v) l1 += std::fabs(x);
  const float scale = static_cast<float>(l1 / 75);
  const auto out = c->decompress(c->compress(in), 75).to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(out[i], v[i] < 0 ? -scale : scale) << i;
}

TEST(Compressors, TopkKeepsExactlyTheLargest) {
  for (int64_t n : {10, 1000, 100000}) {
    for (double ratio : {0.001, 0.01, 0.3}) {
      auto c = dist::make_compressor(opts("topk", 0.5, ratio));
      const Tensor in = random_vector(n, static_cast<uint64_t>(n) + 11);
      const auto v = in.to_vector();
      const auto out = c->decompress(c->compress(in), n).to_vector();
      const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * n)));
      std::vector<float> mags(v.size());
      for (size_t i = 0; i < v.size(); ++i) mags[i] = std::fabs(v[i]);
      std::sort(mags.begin(), mags.end(), std::greater<float>());
      const float kth = mags[k - 1];
      int64_t kept = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        if (out[i] != 0.0f) {
          ++kept;
          EXPECT_EQ(out[i], v[i]);
          EXPECT_GE(std::fabs(v[i]), kth);
        } else {
          EXPECT_LE(std::fabs(v[i]), kth);
        }
      }
      EXPECT_EQ(kept, k) << "n " << n << " ratio " << ratio;
    }
  }
}

// r_new + decode(Q(g + r_old)) == g + r_old, for every compressor, over several iterations.
TEST(ErrorFeedback, ResidualPlusDecodedEqualsInputPlusOldResidual) {
  const int64_t n = 333;
  for (const auto& name : dist::compressor_names()) {
    auto c = dist::make_compressor(opts(name, 0.3, 0.05));
    dist::ErrorFeedback ef(n);
    for (int it = 0; it < 5; ++it) {
      const Tensor g = random_vector(n, 100 + it);
      const auto r_old = ef.residual().to_vector();
      const Tensor v = ef.corrected(g);
      const Tensor decoded = c->decompress(c->compress(v), n);
      ef.update(v, decoded);
      const auto r = ef.residual().to_vector(), d = decoded.to_vector(), gv = g.to_vector();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(r[i] + d[i], gv[i] + r_old[i], 1e-6) << name << " iteration " << it << " i " << i;
    }
    if (name == "none") {
      for (float x : ef.residual().to_vector()) EXPECT_EQ(x, 0.0f);
    }
  }
}

namespace {

// TWO_BIT as specified (compressor.h, compress.h), value by value: the reference the CPU
// kernels (word by word, fused) must match byte for byte.
std::vector<uint8_t> two_bit_reference_encode(const std::vector<float>& v, float tau) {
  std::vector<uint32_t> words((v.size() + 15) / 16, 0u);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t code = v[i] >= tau ? 1u : (v[i] <= -tau ? 2u : 0u);
    words[i / 16] |= code << (2 * (i % 16));
  }
  std::vector<uint8_t> bytes(words.size() * 4);
  if (!bytes.empty()) std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

float two_bit_reference_value(const uint8_t* payload, size_t i, float tau) {
  uint32_t word;
  std::memcpy(&word, payload + 4 * (i / 16), 4);
  const uint32_t code = (word >> (2 * (i % 16))) & 3u;
  return code == 1u ? tau : (code == 2u ? -tau : 0.0f);
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> b(static_cast<size_t>(t.numel()));
  if (!b.empty()) std::memcpy(b.data(), t.contiguous().raw_data(), b.size());
  return b;
}

// Bit-for-bit equality of two float vectors (+0 and -0 differ, NaN equals the same NaN).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// n values in [-2 tau, 2 tau], with every 7th exactly +tau and every 11th exactly -tau (the
// thresholds are inclusive) and some zeros.
std::vector<float> values_at_thresholds(int64_t n, float tau, uint64_t seed) {
  const Tensor r = random_vector(n, seed, 2.0f * tau);
  std::vector<float> v = r.numel() > 0 ? r.to_vector() : std::vector<float>{};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 7 == 3) v[static_cast<size_t>(i)] = tau;
    if (i % 11 == 5) v[static_cast<size_t>(i)] = -tau;
    if (i % 13 == 6) v[static_cast<size_t>(i)] = 0.0f;
  }
  return v;
}

Tensor tensor_of(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

// The word-by-word CPU encoder and decoder write and read exactly the reference's bytes and
// values, on sizes around a word's 16 and values exactly at +/-tau.
TEST(Compressors, TwoBitMatchesTheReferenceOnOddSizes) {
  const float tau = 0.25f;
  auto c = dist::make_compressor(opts("two_bit", tau));
  for (int64_t n : {0, 1, 15, 16, 17, 1000003}) {
    const std::vector<float> v = values_at_thresholds(n, tau, static_cast<uint64_t>(n) + 7);
    const Tensor payload = c->compress(tensor_of(v));
    const std::vector<uint8_t> want = two_bit_reference_encode(v, tau);
    ASSERT_EQ(bytes_of(payload), want) << "n " << n;
    std::vector<float> decoded_want(v.size());
    for (size_t i = 0; i < v.size(); ++i) decoded_want[i] = two_bit_reference_value(want.data(), i, tau);
    const Tensor decoded = c->decompress(payload, n);
    ASSERT_EQ(decoded.numel(), n);
    EXPECT_TRUE(same_bits(n > 0 ? decoded.to_vector() : std::vector<float>{}, decoded_want)) << "n " << n;
  }
}

// Error feedback fused with compression gives the bits of the separate steps (the base class's
// compress_with_feedback, which TWO_BIT's CPU kernel overrides): payload, residual and decoded.
TEST(Compressors, FusedErrorFeedbackEqualsTheSeparateSteps) {
  const float tau = 0.25f;
  for (const auto& name : dist::compressor_names()) {
    auto c = dist::make_compressor(opts(name, tau, 0.05));
    for (int64_t n : {0, 1, 15, 16, 17, 1000003}) {
      if (n == 0 && name == "topk") continue;  // TOPK keeps at least one value: needs n >= 1
      const Tensor g = tensor_of(values_at_thresholds(n, tau, 21));
      // Residuals that put some of g + r exactly at the thresholds too.
      const std::vector<float> r0 = values_at_thresholds(n, tau / 2, 22);
      Tensor fused_r = tensor_of(r0), steps_r = tensor_of(r0);
      Tensor fused_d, steps_d;
      const Tensor fused = c->compress_with_feedback(g, fused_r, &fused_d);
      const Tensor steps = c->dist::Compressor::compress_with_feedback(g, steps_r, &steps_d);
      ASSERT_EQ(bytes_of(fused), bytes_of(steps)) << name << " n " << n;
      if (n == 0) continue;
      EXPECT_TRUE(same_bits(fused_r.to_vector(), steps_r.to_vector())) << name << " n " << n;
      EXPECT_TRUE(same_bits(fused_d.to_vector(), steps_d.to_vector())) << name << " n " << n;
      // Without `decoded` the residual is the same.
      Tensor plain_r = tensor_of(r0);
      c->compress_with_feedback(g, plain_r, nullptr);
      EXPECT_TRUE(same_bits(plain_r.to_vector(), steps_r.to_vector())) << name << " n " << n;
    }
  }
}

// The sum of N payloads decoded in one pass equals, bit for bit, decoding each and adding them
// in order from zeros (the base class's decompress_sum, what every rank used to do).
TEST(Compressors, DecompressSumEqualsDecodingEachInOrder) {
  const float tau = 0.25f;
  for (const auto& name : dist::compressor_names()) {
    auto c = dist::make_compressor(opts(name, tau, 0.05));
    for (int64_t n : {0, 1, 15, 16, 17, 1000003}) {
      if (n == 0 && name == "topk") continue;
      for (int count : {1, 3, 4}) {
        const int64_t len = c->payload_numel(n);
        Tensor gathered = Tensor::empty({len * count}, c->payload_dtype());
        for (int r = 0; r < count; ++r)
          gathered.narrow(0, r * len, len).copy_(c->compress(tensor_of(values_at_thresholds(n, tau, 30 + r))));
        const Tensor fast = c->decompress_sum(gathered, count, n);
        const Tensor slow = c->dist::Compressor::decompress_sum(gathered, count, n);
        ASSERT_EQ(fast.numel(), n);
        if (n == 0) continue;
        EXPECT_TRUE(same_bits(fast.to_vector(), slow.to_vector())) << name << " n " << n << " count " << count;
      }
    }
  }
  // The TWO_BIT sum against values decoded one by one: catches a default that is wrong too.
  auto c = dist::make_compressor(opts("two_bit", tau));
  const int64_t n = 1000003, len = c->payload_numel(n);
  Tensor gathered = Tensor::empty({len * 2}, c->payload_dtype());
  std::vector<std::vector<uint8_t>> payloads;
  for (int r = 0; r < 2; ++r) {
    payloads.push_back(two_bit_reference_encode(values_at_thresholds(n, tau, 40 + r), tau));
    std::memcpy(static_cast<uint8_t*>(gathered.raw_data()) + r * len, payloads.back().data(), payloads.back().size());
  }
  const auto sum = c->decompress_sum(gathered, 2, n).to_vector();
  for (size_t i = 0; i < sum.size(); ++i) {
    const float want = (0.0f + two_bit_reference_value(payloads[0].data(), i, tau)) +
                       two_bit_reference_value(payloads[1].data(), i, tau);
    ASSERT_EQ(sum[i], want) << i;
  }
  EXPECT_NE(error_of([&] { c->decompress_sum(gathered, 3, n); }).find("payload"), std::string::npos);
}

TEST(Compressors, BadOptionsAreClearErrors) {
  EXPECT_NE(error_of([] { dist::make_compressor(opts("two_bit", 0.0)); }).find("dist.compressor.tau"),
            std::string::npos);
  EXPECT_NE(error_of([] { dist::make_compressor(opts("two_bit", -1.0)); }).find("must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { dist::make_compressor(opts("topk", 0.5, 0.0)); }).find("dist.compressor.topk_ratio"),
            std::string::npos);
  EXPECT_NE(error_of([] { dist::make_compressor(opts("topk", 0.5, 1.5)); }).find("(0, 1]"),
            std::string::npos);
  const std::string e = error_of([] { dist::make_compressor(opts("THREE_BIT")); });
  EXPECT_NE(e.find("THREE_BIT"), std::string::npos) << e;
  EXPECT_NE(e.find("two_bit"), std::string::npos) << e;  // lists the valid ones
}

// Over real Gloo ranks: every compressor's exchange returns the same average on every rank,
// equal to the mean of the ranks' decoded payloads (FP16 and NONE by allreduce, the others by
// allgather); a full-precision exchange is the mean of the plain g and keeps r for the next
// compressed one (CD-SGD's k-step correction as its reference).
TEST(GradientExchange, Gloo_AverageOfDecodedPayloads) {
  const int n_ranks = 3;
  const int64_t n = 1000;
  EXPECT_TRUE(mt::testing::run_ranks(n_ranks, [&](mt::testing::RankContext& ctx) {
    for (const auto& name : dist::compressor_names()) {
      auto reference = dist::make_compressor(opts(name, 0.5, 0.05));
      dist::GradientExchange ex(ctx.group, dist::make_compressor(opts(name, 0.5, 0.05)), n);
      // Each rank's input is known to all: rank r's is random_vector(n, 40 + r).
      std::vector<float> want(n, 0.0f);
      for (int r = 0; r < n_ranks; ++r) {
        const Tensor g = random_vector(n, 40 + r);
        const auto d = reference->decompress(reference->compress(g), n).to_vector();
        for (int64_t i = 0; i < n; ++i) want[i] += d[i];
      }
      dist::PendingExchange e = ex.launch(random_vector(n, 40 + ctx.rank), false);
      const auto got = ex.wait(e).to_vector();
      const double tol = name == "fp16" ? 2e-3 : 1e-6;  // halves are summed in half precision
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i] / n_ranks, tol) << name << " " << i;
      EXPECT_GT(ex.stats().bytes_sent, 0);

      // Full precision: the mean of g, the residual as it was.
      const auto residual = ex.error_feedback().residual().to_vector();
      dist::PendingExchange f = ex.launch(random_vector(n, 60 + ctx.rank), true);
      const auto full = ex.wait(f).to_vector();
      ASSERT_EQ(full.size(), static_cast<size_t>(n));
      std::vector<float> mean(n, 0.0f);
      for (int r = 0; r < n_ranks; ++r) {
        const auto g = random_vector(n, 60 + r).to_vector();
        for (int64_t i = 0; i < n; ++i) mean[i] += g[i] / n_ranks;
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(full[i], mean[i], 1e-5) << name << " " << i;
      EXPECT_EQ(ex.error_feedback().residual().to_vector(), residual) << name;
    }
  }).ok_or_report());
}
