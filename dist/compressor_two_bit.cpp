// TWO_BIT (the CD-SGD reference compressor): each value becomes +tau if >= tau, -tau if <= -tau,
// else 0; two bits each (00 zero, 01 +tau, 10 -tau), 16 values per 32-bit word, so 1/16 of the
// float32 bytes. Small values are not lost: error feedback keeps them until they add up to tau.
// CUDA inputs and payloads go to core/kernels/cuda/compress.h, which writes the same bytes.
#include <cstring>

#include "dist/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

class TwoBitCompressor final : public Compressor {
 public:
  explicit TwoBitCompressor(float tau) : tau_(tau) {}
  std::string name() const override { return "two_bit(tau=" + std::to_string(tau_) + ")"; }

  Tensor compress(const Tensor& in) const override {
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return core::cuda::two_bit_encode(in.contiguous(), tau_);
#endif
    const int64_t n = in.numel();
    const float* v = in.data<float>();
    std::vector<uint32_t> words(static_cast<size_t>(words_for(n)), 0u);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t code = v[i] >= tau_ ? 1u : (v[i] <= -tau_ ? 2u : 0u);
      words[static_cast<size_t>(i / 16)] |= code << (2 * (i % 16));
    }
    Tensor out = Tensor::empty({payload_numel(n)}, core::DType::UInt8);
    if (!words.empty()) std::memcpy(out.raw_data(), words.data(), words.size() * 4);
    return out;
  }

  Tensor decompress(const Tensor& payload, int64_t numel) const override {
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda()) return core::cuda::two_bit_decode(payload, numel, tau_);
#endif
    std::vector<uint32_t> words(static_cast<size_t>(words_for(numel)));
    if (!words.empty()) std::memcpy(words.data(), payload.raw_data(), words.size() * 4);
    Tensor out = Tensor::empty({numel});
    float* o = out.data<float>();
    const float table[4] = {0.0f, tau_, -tau_, 0.0f};
    for (int64_t i = 0; i < numel; ++i) o[i] = table[(words[static_cast<size_t>(i / 16)] >> (2 * (i % 16))) & 3u];
    return out;
  }

  bool summable() const override { return false; }
  core::DType payload_dtype() const override { return core::DType::UInt8; }
  int64_t payload_numel(int64_t numel) const override { return 4 * words_for(numel); }

 private:
  static int64_t words_for(int64_t n) { return (n + 15) / 16; }
  float tau_;
};

}  // namespace

std::unique_ptr<Compressor> make_two_bit_compressor(float tau) {
  return std::make_unique<TwoBitCompressor>(tau);
}

}  // namespace mt::dist
