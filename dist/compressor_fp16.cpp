// FP16: half the bytes, summable (the Gloo allreduce adds halves). The tensor library has no
// CPU float<->half conversion, so it is written here with bit manipulation: IEEE binary16,
// round to nearest even, subnormals kept, overflow to infinity (beyond 65504: fine for
// gradients, which are averaged after the sum; a sum of N halves rounds N times).
#include <cmath>
#include <cstring>

#include "dist/compressor.h"

namespace mt::dist {
namespace {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf, NaN
  const int e = static_cast<int>(exp) - 127 + 15;  // the half's biased exponent
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // too large: infinity
  auto round = [](uint32_t kept, uint32_t dropped, uint32_t halfway) {
    // Ties to even; a carry out of the mantissa correctly bumps the exponent.
    return dropped > halfway || (dropped == halfway && (kept & 1u)) ? kept + 1 : kept;
  };
  if (e <= 0) {  // a subnormal half (units of 2^-24), or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;  // the implicit leading 1
    const int shift = 14 - e;
    return static_cast<uint16_t>(
        sign | round(mant >> shift, mant & ((1u << shift) - 1), 1u << (shift - 1)));
  }
  const uint32_t kept = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  return static_cast<uint16_t>(sign | round(kept, mant & 0x1fffu, 0x1000u));
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                               : (sign | ((exp + 112) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

class Fp16Compressor final : public Compressor {
 public:
  std::string name() const override { return "FP16"; }
  Tensor compress(const Tensor& in) const override {
    const int64_t n = in.numel();
    Tensor out = Tensor::empty({n}, core::DType::Float16);
    const float* v = in.data<float>();
    auto* h = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) h[i] = float_to_half(v[i]);
    return out;
  }
  Tensor decompress(const Tensor& payload, int64_t numel) const override {
    Tensor out = Tensor::empty({numel});
    const auto* h = static_cast<const uint16_t*>(payload.raw_data());
    float* o = out.data<float>();
    for (int64_t i = 0; i < numel; ++i) o[i] = half_to_float(h[i]);
    return out;
  }
  bool summable() const override { return true; }
  core::DType payload_dtype() const override { return core::DType::Float16; }
  int64_t payload_numel(int64_t numel) const override { return numel; }
};

}  // namespace

std::unique_ptr<Compressor> make_fp16_compressor() { return std::make_unique<Fp16Compressor>(); }

}  // namespace mt::dist
