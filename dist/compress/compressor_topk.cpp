// TOPK: keep the k = ceil(ratio * n) values of largest magnitude; the payload is k float32
// values then their k int32 indices (8k bytes). Selecting by a full sort costs n log n; like
// DGC we estimate the threshold from a strided sample (its top ratio quantile), take the
// values above it, and only fall back to an exact selection (nth_element, O(n)) when the
// sample's guess keeps too few. Too many candidates are cut to exactly k with nth_element over
// the candidates only. Every rank's payload has the same size, so allgather suffices.
// Equal magnitudes are ordered by index (the lower wins), so the chosen set is a function of
// the input alone: the CUDA encoder (core/kernels/cuda/compress.h: the same sample, a CUB
// compaction of the candidates, a stable radix sort to cut them to k) writes the same bytes.
// DGC's ratio warm-up is topk_ratio_at (below); its momentum correction is
// momentum_correction.h, usable with every compressor.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "dist/compress/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

class TopkCompressor final : public Compressor {
 public:
  explicit TopkCompressor(double ratio) : ratio_(ratio) {}
  std::string name() const override { return "topk(ratio=" + std::to_string(ratio_) + ")"; }

  int64_t k_for(int64_t n) const {
    if (n == 0) return 0;
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(n))), 1, n);
  }

  Tensor compress(const Tensor& in) const override {
    const int64_t n = in.numel();
    const int64_t k = k_for(n);
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return core::cuda::topk_encode(in.contiguous(), k);
#endif
    const float* v = in.data<float>();
    std::vector<int32_t> chosen = select(v, n, k);
    Tensor out = Tensor::empty({payload_numel(n)}, core::DType::UInt8);
    auto* bytes = static_cast<uint8_t*>(out.raw_data());
    std::vector<float> values(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) values[j] = v[chosen[j]];
    if (k > 0) {
      std::memcpy(bytes, values.data(), k * 4);
      std::memcpy(bytes + 4 * k, chosen.data(), k * 4);
    }
    return out;
  }

  Tensor decompress(const Tensor& payload, int64_t numel) const override {
    const int64_t k = k_for(numel);
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda()) return core::cuda::topk_decode(payload, numel, k);
#endif
    const auto* bytes = static_cast<const uint8_t*>(payload.raw_data());
    Tensor out = Tensor::zeros({numel});
    float* o = out.data<float>();
    for (int64_t j = 0; j < k; ++j) {
      float value;
      int32_t index;
      std::memcpy(&value, bytes + 4 * j, 4);
      std::memcpy(&index, bytes + 4 * (k + j), 4);
      if (index >= 0 && index < numel) o[index] = value;  // a corrupt index is dropped, not written
    }
    return out;
  }

  bool summable() const override { return false; }
  core::DType payload_dtype() const override { return core::DType::UInt8; }
  int64_t payload_numel(int64_t numel) const override { return 8 * k_for(numel); }

 private:
  // Indices of exactly k values of largest |v| (equal |v|: the lower index first), ascending.
  static std::vector<int32_t> select(const float* v, int64_t n, int64_t k) {
    std::vector<int32_t> idx;
    if (k == 0) return idx;
    auto by_magnitude = [v](int32_t a, int32_t b) {
      const float ma = std::fabs(v[a]), mb = std::fabs(v[b]);
      return ma > mb || (ma == mb && a < b);
    };
    // Threshold from a sample of at most ~1024 values at a fixed stride (deterministic).
    const int64_t stride = std::max<int64_t>(1, n / 1024);
    std::vector<float> sample;
    for (int64_t i = 0; i < n; i += stride) sample.push_back(std::fabs(v[i]));
    const auto ks = static_cast<int64_t>(std::ceil(static_cast<double>(k) / n * sample.size()));
    const int64_t pos = std::clamp<int64_t>(ks, 1, static_cast<int64_t>(sample.size())) - 1;
    std::nth_element(sample.begin(), sample.begin() + pos, sample.end(), std::greater<float>());
    // A little below the estimate, so the candidates usually cover the true top k.
    const float threshold = sample[pos] * 0.8f;
    for (int64_t i = 0; i < n; ++i)
      if (std::fabs(v[i]) >= threshold) idx.push_back(static_cast<int32_t>(i));
    if (static_cast<int64_t>(idx.size()) < k) {  // the sample misled us: exact selection
      idx.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    }
    if (static_cast<int64_t>(idx.size()) > k) {
      std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), by_magnitude);
      idx.resize(static_cast<size_t>(k));
    }
    std::sort(idx.begin(), idx.end());
    return idx;
  }

  double ratio_;
};

}  // namespace

std::unique_ptr<Compressor> make_topk_compressor(double ratio) {
  return std::make_unique<TopkCompressor>(ratio);
}

double topk_ratio_at(const CompressionOptions& options, int64_t iteration) {
  const int64_t warmup = options.topk_warmup_iters;
  if (warmup <= 0 || iteration + 1 >= warmup) return options.topk_ratio;
  const double progress = static_cast<double>(std::max<int64_t>(iteration, 0) + 1) / static_cast<double>(warmup);
  return std::pow(options.topk_ratio, progress);
}

}  // namespace mt::dist
