// TWO_BIT (the CD-SGD reference compressor): each value becomes +tau if >= tau, -tau if <= -tau,
// else 0; two bits each (00 zero, 01 +tau, 10 -tau), 16 values per 32-bit word, so 1/16 of the
// float32 bytes. Small values are not lost: error feedback keeps them until they add up to tau.
// CUDA inputs and payloads go to core/kernels/cuda/compress.h, which writes the same bytes.
//
// The CPU loops run word by word (16 values make one word, so no value's place needs a division
// or a modulo) and write straight into the output tensors. Encoding picks codes and decoded
// values with bit masks instead of branches; decoding reads a word a byte at a time from a table
// of the 4 floats each byte stands for. Error feedback is fused with encoding, and the N
// allgathered payloads are decoded and summed in one pass (compressor.h), with the bits of the
// separate steps.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "dist/compress/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

constexpr int64_t kValuesPerWord = 16;

int64_t words_for(int64_t n) { return (n + kValuesPerWord - 1) / kValuesPerWord; }

// Payload words are read and written through memcpy: a payload may start anywhere in an
// allgather buffer of bytes, and the compiler makes each one a single load or store.
uint32_t load_word(const uint8_t* bytes, int64_t w) {
  uint32_t word;
  std::memcpy(&word, bytes + 4 * w, 4);
  return word;
}
void store_word(uint8_t* bytes, int64_t w, uint32_t word) { std::memcpy(bytes + 4 * w, &word, 4); }

class TwoBitCompressor final : public Compressor {
 public:
  explicit TwoBitCompressor(float tau) : tau_(tau) {
    // byte_values_[b][k]: the value of code k (bits 2k, 2k+1) of byte b.
    const float value_of_code[4] = {0.0f, tau_, -tau_, 0.0f};
    for (int b = 0; b < 256; ++b)
      for (int k = 0; k < 4; ++k) byte_values_[b][k] = value_of_code[(b >> (2 * k)) & 3];
  }
  std::string name() const override { return "two_bit(tau=" + std::to_string(tau_) + ")"; }

  Tensor compress(const Tensor& in) const override {
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return core::cuda::two_bit_encode(in.contiguous(), tau_);
#endif
    const Tensor v = in.contiguous();
    Tensor out = Tensor::empty({payload_numel(v.numel())}, core::DType::UInt8);
    encode<false>(v.data<float>(), nullptr, nullptr, v.numel(), static_cast<uint8_t*>(out.raw_data()));
    return out;
  }

  Tensor decompress(const Tensor& payload, int64_t numel) const override {
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda()) return core::cuda::two_bit_decode(payload, numel, tau_);
#endif
    return decode_sum(payload, 1, numel);
  }

  Tensor compress_with_feedback(const Tensor& grad, Tensor& residual, Tensor* decoded) const override {
    if (grad.is_cuda() || residual.is_cuda()) return Compressor::compress_with_feedback(grad, residual, decoded);
    const int64_t n = residual.numel();
    MT_CHECK(grad.numel() == n && residual.is_contiguous(), "internal: TWO_BIT error feedback on a gradient of ",
             grad.numel(), " values and a residual of ", n);
    const Tensor g = grad.contiguous();
    Tensor out = Tensor::empty({payload_numel(n)}, core::DType::UInt8);
    Tensor own = decoded ? Tensor::empty({n}) : Tensor();
    encode<true>(g.data<float>(), residual.data<float>(), decoded ? own.data<float>() : nullptr, n,
           static_cast<uint8_t*>(out.raw_data()));
    if (decoded) *decoded = own;
    return out;
  }

  Tensor decompress_sum(const Tensor& payloads, int count, int64_t numel) const override {
    if (payloads.is_cuda()) return Compressor::decompress_sum(payloads, count, numel);
    return decode_sum(payloads, count, numel);
  }

  bool summable() const override { return false; }
  core::DType payload_dtype() const override { return core::DType::UInt8; }
  int64_t payload_numel(int64_t numel) const override { return 4 * words_for(numel); }

 private:
  // Encodes v = g, or v = g + r when a residual is given, into words; with a residual also sets
  // r <- v - decode(code) and, when `decoded` is given, decoded = decode(code): the same float
  // operations as the separate steps (v = g + r, then v - decoded), so the same bits.
  //
  // A block of values at a time, in two loops. The first computes each value's code (and
  // residual) on local copies: nothing aliases them, and with the decoded value picked by bit
  // masks, without branches, it runs as vector instructions (a gradient's signs are random:
  // branches, which compilers make of float selects, would be mispredicted half the time). The
  // second packs 16 codes per word.
  template <bool kWithResidual>
  void encode(const float* g, float* r, float* decoded, int64_t n, uint8_t* words) const {
    constexpr int64_t kBlock = 16 * kValuesPerWord;
    const float tau = tau_, minus_tau = -tau_;
    uint32_t tau_bits, minus_tau_bits;
    std::memcpy(&tau_bits, &tau, 4);
    std::memcpy(&minus_tau_bits, &minus_tau, 4);
    for (int64_t first = 0; first < n; first += kBlock) {
      const int64_t count = std::min(kBlock, n - first);
      const auto bytes = static_cast<size_t>(count) * sizeof(float);
      float v[kBlock], res[kBlock], values[kBlock];
      uint32_t codes[kBlock] = {};  // past the end of the vector: 00
      std::memcpy(v, g + first, bytes);
      if constexpr (kWithResidual) std::memcpy(res, r + first, bytes);
      for (int64_t j = 0; j < count; ++j) {
        if constexpr (kWithResidual) v[j] += res[j];
        const uint32_t plus = v[j] >= tau, minus = v[j] <= -tau;
        codes[j] = plus | (minus << 1);
        // The decoded value: the bits of +tau, of -tau, or none (+0).
        const uint32_t value_bits = (tau_bits & (0u - plus)) | (minus_tau_bits & (0u - minus));
        std::memcpy(&values[j], &value_bits, 4);
        res[j] = v[j] - values[j];
      }
      if constexpr (kWithResidual) {
        std::memcpy(r + first, res, bytes);
        if (decoded) std::memcpy(decoded + first, values, bytes);
      }
      for (int64_t w = 0; w < words_for(count); ++w) {
        uint32_t word = 0;
        for (int64_t j = 0; j < kValuesPerWord; ++j) word |= codes[w * kValuesPerWord + j] << (2 * j);
        store_word(words, first / kValuesPerWord + w, word);
      }
    }
  }

  // The sum over `count` payloads, one after another in `payloads`, in payload order from zero.
  // Word by word: the 16 sums of a word stay in registers while every payload's word is added.
  Tensor decode_sum(const Tensor& payloads, int count, int64_t numel) const {
    const int64_t len = payload_numel(numel);
    MT_CHECK(count >= 1 && payloads.numel() == len * count && payloads.dtype() == core::DType::UInt8,
             "TWO_BIT: expected ", count, " payload(s) of ", len, " bytes (", numel, " values), got ",
             payloads.str());
    const Tensor p = payloads.contiguous();
    const auto* bytes = static_cast<const uint8_t*>(p.raw_data());
    Tensor out = Tensor::empty({numel});
    float* o = out.data<float>();
    const int64_t full_words = numel / kValuesPerWord;
    for (int64_t w = 0; w <= full_words; ++w) {
      const int64_t first = w * kValuesPerWord;
      const int64_t values = w < full_words ? kValuesPerWord : numel - first;
      if (values == 0) break;
      float sum[kValuesPerWord] = {};
      for (int r = 0; r < count; ++r) {
        const uint32_t word = load_word(bytes + r * len, w);
        for (int byte = 0; byte < 4; ++byte) {
          const float* four = byte_values_[(word >> (8 * byte)) & 0xffu];
          for (int k = 0; k < 4; ++k) sum[4 * byte + k] += four[k];
        }
      }
      std::memcpy(o + first, sum, static_cast<size_t>(values) * sizeof(float));
    }
    return out;
  }

  float tau_;
  alignas(16) float byte_values_[256][4];
};

}  // namespace

std::unique_ptr<Compressor> make_two_bit_compressor(float tau) {
  return std::make_unique<TwoBitCompressor>(tau);
}

}  // namespace mt::dist
