// SIGN (scaled sign, EF-SGD): every value becomes mean|v| * sign(v); 1 bit per value (set =
// negative; zero counts as positive) plus the float32 scale, so about 1/32 of the bytes. The
// scale keeps the decoded vector's L1 norm equal to the input's.
//
// The sum of |v| is in double, in a fixed blocked order that one GPU warp per block reproduces
// (core/kernels/cuda/compress.h, which CUDA inputs and payloads go to): blocks of 8192 values,
// inside a block 32 interleaved partial sums (value j to partial j % 32, each in index order)
// added in lane order, then the block sums in block order. Both devices therefore write the
// same scale bits, and a GPU run repeats itself exactly. Up to 32 values it is the plain
// sequential sum.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "dist/compress/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

constexpr int64_t kSumBlock = 8192;
constexpr int64_t kSumLanes = 32;
#ifdef MT_CUDA_KERNELS
static_assert(kSumBlock == core::cuda::kSignSumBlock && kSumLanes == core::cuda::kSignSumLanes,
              "the CPU and CUDA SIGN encoders must sum |v| in the same order");
#endif

double sum_of_magnitudes(const float* v, int64_t n) {
  double total = 0.0;
  for (int64_t begin = 0; begin < n; begin += kSumBlock) {
    const int64_t end = std::min(begin + kSumBlock, n);
    double partial[kSumLanes] = {};
    for (int64_t j = begin; j < end; j += kSumLanes) {
      const int64_t lanes = std::min(kSumLanes, end - j);
      for (int64_t l = 0; l < lanes; ++l) partial[l] += std::fabs(v[j + l]);
    }
    total += std::accumulate(partial, partial + kSumLanes, 0.0);
  }
  return total;
}

class SignCompressor final : public Compressor {
 public:
  std::string name() const override { return "sign"; }

  Tensor compress(const Tensor& in) const override {
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return core::cuda::sign_encode(in.contiguous());
#endif
    const int64_t n = in.numel();
    const float* v = in.data<float>();
    const double l1 = sum_of_magnitudes(v, n);
    const float scale = n > 0 ? static_cast<float>(l1 / static_cast<double>(n)) : 0.0f;
    std::vector<uint32_t> words(static_cast<size_t>(words_for(n)), 0u);
    for (int64_t i = 0; i < n; ++i)
      if (v[i] < 0) words[static_cast<size_t>(i / 32)] |= 1u << (i % 32);
    Tensor out = Tensor::empty({payload_numel(n)}, core::DType::UInt8);
    auto* bytes = static_cast<uint8_t*>(out.raw_data());
    std::memcpy(bytes, &scale, 4);
    if (!words.empty()) std::memcpy(bytes + 4, words.data(), words.size() * 4);
    return out;
  }

  Tensor decompress(const Tensor& payload, int64_t numel) const override {
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda()) return core::cuda::sign_decode(payload, numel);
#endif
    const auto* bytes = static_cast<const uint8_t*>(payload.raw_data());
    float scale;
    std::memcpy(&scale, bytes, 4);
    std::vector<uint32_t> words(static_cast<size_t>(words_for(numel)));
    if (!words.empty()) std::memcpy(words.data(), bytes + 4, words.size() * 4);
    Tensor out = Tensor::empty({numel});
    float* o = out.data<float>();
    for (int64_t i = 0; i < numel; ++i)
      o[i] = (words[static_cast<size_t>(i / 32)] >> (i % 32)) & 1u ? -scale : scale;
    return out;
  }

  bool summable() const override { return false; }
  core::DType payload_dtype() const override { return core::DType::UInt8; }
  int64_t payload_numel(int64_t numel) const override { return 4 + 4 * words_for(numel); }

 private:
  static int64_t words_for(int64_t n) { return (n + 31) / 32; }
};

}  // namespace

std::unique_ptr<Compressor> make_sign_compressor() { return std::make_unique<SignCompressor>(); }

}  // namespace mt::dist
