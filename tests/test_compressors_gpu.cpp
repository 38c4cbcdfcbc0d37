// The CUDA compressors (core/kernels/cuda/compress.h, dispatched from dist/compress/compressor_*.cpp)
// against the CPU ones: for every compressor and sizes from 1 to 3 million values (not
// multiples of 16 or 32, around SIGN's 8192-value summation blocks), the GPU payload has the
// CPU payload's bytes (TOPK: first the same set of (index, value) pairs, then the same bytes,
// since both order the indices ascending and break ties by index); decoding on either device
// gives the same floats; payloads and decoded vectors stay on the GPU; and error feedback on
// the GPU keeps r_new + decode(Q(g + r_old)) == g + r_old. Every test starts with
// MT_REQUIRE_GPU(), so without a GPU (or in a CPU-only build) they all skip visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "dist/compress/compressor.h"
#include "dist/compress/error_feedback.h"
#include "support/compression_helpers.h"
#include "support/gradcheck.h"

using namespace mt;
using core::Device;
using core::Tensor;

namespace {

const std::vector<int64_t> kSizes = {1, 2, 15, 16, 17, 31, 32, 33, 1000, 8191, 8192, 8193, 65537, 3000001};

using mt::testing::random_vector;
// A short name for the many call sites below (defaults: tau 0.5, TOPK ratio 0.1).
const auto opts = [](const auto&... args) { return mt::testing::compression_options(args...); };

// Values that stress FP16 rounding (ties, subnormals, overflow, signed zero, Inf, NaN), spread
// over a random vector.
Tensor with_fp16_edges(Tensor t) {
  const float edges[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f,
                         -70000.0f, 1e-7f, std::ldexp(1.0f, -25), std::ldexp(1.0f, -26), -0.0f,
                         std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::denorm_min()};
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (size_t j = 0; j < std::size(edges); ++j) p[(static_cast<int64_t>(j) * 7919) % n] = edges[j];
  return t;
}

std::vector<uint8_t> host_bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.nbytes()));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

// Index of the first differing byte, or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto m = std::mismatch(a.begin(), a.end(), b.begin());
  return m.first == a.end() ? -1 : static_cast<int64_t>(m.first - a.begin());
}

// TOPK payload -> sorted (index, value bits) pairs.
std::vector<std::pair<int32_t, uint32_t>> topk_pairs(const std::vector<uint8_t>& bytes) {
  const size_t k = bytes.size() / 8;
  std::vector<std::pair<int32_t, uint32_t>> pairs(k);
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(&pairs[j].second, bytes.data() + 4 * j, 4);
    std::memcpy(&pairs[j].first, bytes.data() + 4 * (k + j), 4);
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

// Compressor configurations exercised everywhere.
std::vector<dist::CompressionOptions> all_configs() {
  return {opts("none"), opts("fp16"), opts("two_bit", 0.5), opts("two_bit", 0.05), opts("sign"),
          opts("topk", 0.5, 0.001), opts("topk", 0.5, 0.01), opts("topk", 0.5, 0.3), opts("topk", 0.5, 1.0)};
}

std::string describe(const dist::Compressor& c, int64_t n, const std::string& input) {
  return c.name() + ", n = " + std::to_string(n) + ", " + input + " input";
}

// Encodes `in` on both devices and checks the payloads; then decodes each payload on both
// devices and checks the results have the same bits.
void expect_same_on_both_devices(const dist::Compressor& c, const Tensor& in, const std::string& what) {
  const int64_t n = in.numel();
  const Device gpu = Device::cuda();
  const Tensor cpu_payload = c.compress(in);
  const Tensor gpu_payload = c.compress(in.to(gpu));
  ASSERT_TRUE(gpu_payload.is_cuda()) << what;
  ASSERT_EQ(gpu_payload.dtype(), cpu_payload.dtype()) << what;
  ASSERT_EQ(gpu_payload.numel(), c.payload_numel(n)) << what;
  const auto cpu_bytes = host_bytes(cpu_payload), gpu_bytes = host_bytes(gpu_payload);
  if (c.name().rfind("topk", 0) == 0) {
    ASSERT_EQ(topk_pairs(gpu_bytes), topk_pairs(cpu_bytes)) << what << ": another set of (index, value) pairs";
  }
  ASSERT_EQ(first_difference(gpu_bytes, cpu_bytes), -1) << what << ": payload bytes differ";

  const Tensor cpu_decoded = c.decompress(cpu_payload, n);
  const Tensor gpu_decoded = c.decompress(cpu_payload.to(gpu), n);
  ASSERT_TRUE(gpu_decoded.is_cuda()) << what;
  ASSERT_EQ(gpu_decoded.numel(), n) << what;
  ASSERT_EQ(first_difference(host_bytes(gpu_decoded), host_bytes(cpu_decoded)), -1)
      << what << ": decoded floats differ";
  // And the GPU's own payload decodes on the CPU to the same values.
  ASSERT_EQ(first_difference(host_bytes(c.decompress(gpu_payload.to(Device::cpu()), n)), host_bytes(cpu_decoded)), -1)
      << what;
}

}  // namespace

TEST(CompressorsGpu, EncodeAndDecodeMatchTheCpuOnRandomInputs) {
  MT_REQUIRE_GPU();
  for (const auto& o : all_configs()) {
    auto c = dist::make_compressor(o);
    for (int64_t n : kSizes) {
      // Scale 2 puts TWO_BIT's codes on all three values for both taus.
      const Tensor in = random_vector(n, static_cast<uint64_t>(n) * 31 + 7, 2.0f);
      expect_same_on_both_devices(*c, in, describe(*c, n, "random"));
    }
  }
}

TEST(CompressorsGpu, AllZeroInputs) {
  MT_REQUIRE_GPU();
  for (const auto& o : all_configs()) {
    auto c = dist::make_compressor(o);
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{33}, int64_t{8193}, int64_t{100003}}) {
      const Tensor in = Tensor::zeros({n});
      expect_same_on_both_devices(*c, in, describe(*c, n, "all-zero"));
      // Every value decodes to zero (TOPK sends the k lowest indices: equal magnitudes).
      for (float x : c->decompress(c->compress(in.to(Device::cuda())), n).to_vector())
        ASSERT_EQ(x, 0.0f) << c->name();
    }
  }
}

TEST(CompressorsGpu, Fp16EdgeValuesHaveTheCpuBits) {
  MT_REQUIRE_GPU();
  auto c = dist::make_compressor(opts("fp16"));
  for (int64_t n : {int64_t{13}, int64_t{1000}, int64_t{100001}})
    expect_same_on_both_devices(*c, with_fp16_edges(random_vector(n, 5, 1e-3f)), describe(*c, n, "edge-value"));
  // Every float16 bit pattern decodes alike on both devices.
  Tensor all = Tensor::empty({65536}, core::DType::Float16);
  auto* h = static_cast<uint16_t*>(all.raw_data());
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  EXPECT_EQ(first_difference(host_bytes(c->decompress(all.to(Device::cuda()), 65536)),
                             host_bytes(c->decompress(all, 65536))),
            -1);
}

TEST(CompressorsGpu, TopkTiesGoToTheLowerIndex) {
  MT_REQUIRE_GPU();
  // Many equal magnitudes of both signs: the k-th largest |v| is shared by hundreds of values.
  const int64_t n = 50000;
  Tensor in = Tensor::empty({n});
  float* p = in.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(1 + (i * 7) % 5);
  for (double ratio : {0.001, 0.05, 0.5}) {
    auto c = dist::make_compressor(opts("topk", 0.5, ratio));
    expect_same_on_both_devices(*c, in, describe(*c, n, "tied"));
    // The chosen indices are the lowest among the values of the cut-off magnitude.
    const auto pairs = topk_pairs(host_bytes(c->compress(in.to(Device::cuda()))));
    const auto k = static_cast<int64_t>(pairs.size());
    std::vector<std::pair<float, int64_t>> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = {-std::fabs(p[i]), i};
    std::sort(order.begin(), order.end());
    std::vector<int32_t> want;
    for (int64_t j = 0; j < k; ++j) want.push_back(static_cast<int32_t>(order[j].second));
    std::sort(want.begin(), want.end());
    for (int64_t j = 0; j < k; ++j) ASSERT_EQ(pairs[j].first, want[j]) << "ratio " << ratio << " j " << j;
  }
}

TEST(CompressorsGpu, PayloadsAtAnyByteOffsetDecode) {
  MT_REQUIRE_GPU();
  // A payload that is a view starting at an odd byte offset (the kernels read 32-bit words).
  const int64_t n = 1001;
  const Tensor in = random_vector(n, 77, 2.0f);
  for (const auto& o : all_configs()) {
    auto c = dist::make_compressor(o);
    if (c->payload_dtype() != core::DType::UInt8) continue;
    const Tensor payload = c->compress(in);
    Tensor shifted = Tensor::zeros({payload.numel() + 1}, core::DType::UInt8, Device::cuda());
    Tensor view = shifted.narrow(0, 1, payload.numel());
    view.copy_(payload);
    EXPECT_EQ(first_difference(host_bytes(c->decompress(view, n)), host_bytes(c->decompress(payload, n))), -1)
        << c->name();
  }
}

// r_new + decode(Q(g + r_old)) == g + r_old on the GPU, over several iterations; the residual
// lives on the GPU, whether the feedback was made there or followed its first gradient there.
TEST(CompressorsGpu, ErrorFeedbackInvariantOnTheGpu) {
  MT_REQUIRE_GPU();
  for (const auto& o : all_configs()) {
    auto c = dist::make_compressor(o);
    for (int64_t n : {int64_t{333}, int64_t{8193}, int64_t{1000003}}) {
      for (bool made_on_gpu : {true, false}) {
        dist::ErrorFeedback ef(n, made_on_gpu ? Device::cuda() : Device::cpu());
        for (int it = 0; it < 4; ++it) {
          const Tensor g = random_vector(n, 100 + static_cast<uint64_t>(it) + static_cast<uint64_t>(n), 0.4f)
                               .to(Device::cuda());
          const auto r_old = ef.residual().to_vector();
          const Tensor v = ef.corrected(g);
          ASSERT_TRUE(v.is_cuda() && ef.residual().is_cuda()) << c->name();
          const Tensor decoded = c->decompress(c->compress(v), n);
          ASSERT_TRUE(decoded.is_cuda()) << c->name();
          ef.update(v, decoded);
          ASSERT_TRUE(ef.residual().is_cuda()) << c->name();
          const auto r = ef.residual().to_vector(), d = decoded.to_vector(), gv = g.to_vector();
          for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(r[i] + d[i], gv[i] + r_old[i], 1e-6)
                << c->name() << " n " << n << " iteration " << it << " i " << i;
        }
        if (c->name() == "none") {
          for (float x : ef.residual().to_vector()) ASSERT_EQ(x, 0.0f);
        }
      }
    }
  }
}
