// Compute precision of the matrix products and convolutions (mixed precision).
//
// One process-wide setting, like TF32 in kernels/cuda/math_mode.h: FP32 (the default), BF16 or
// FP16. Under BF16/FP16 the matmul, batched matmul, linear and conv2d kernels (forward and both
// backward passes) round the two inputs of every product to the 16-bit format and accumulate
// in float32. Tensors stay float32 everywhere else: weights (the "master" copy the optimizer
// updates), activations, gradients, optimizer state. What differs between the ops:
//   - matmul / linear: float32 output (cuBLAS writes CUDA_R_32F);
//   - conv2d: y, dx and dw are also rounded to the format, since cuDNN's half and bfloat16
//     configurations write their outputs in the inputs' type; the bias is added (and its
//     gradient summed) in float32 afterwards.
// The GPU computes this on tensor cores; the CPU emulates it by rounding copies of the inputs
// and running its float32 kernels. Products of two bf16 (8-bit significand) or fp16 (11-bit)
// values are exact in float32, so the emulation differs from the GPU only in summation order,
// which makes it the reference of the CPU-vs-GPU tests.
//
// Rounding is IEEE round-to-nearest-even. bf16 keeps float32's exponent range (only the
// significand shrinks); fp16 overflows to +-Inf at 65520 and above (65504 is its largest
// finite value) and has subnormals down to 2^-24, below which values round to zero. That
// narrow range is why float16 training needs loss scaling (optim/loss_scaler.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/host_device.h"

namespace mt::core {

class Tensor;

enum class ComputePrecision : uint8_t { FP32, BF16, FP16 };

void set_compute_precision(ComputePrecision p);
ComputePrecision compute_precision();

// "fp32", "bf16" or "fp16" (RunConfig.precision); anything else is an Error naming the field
// and the valid values.
ComputePrecision parse_compute_precision(const std::string& name);
const char* compute_precision_name(ComputePrecision p);
// The 16-bit storage type of a reduced precision (BFloat16 or Float16); Float32 for FP32.
DType storage_dtype(ComputePrecision p);

// Sets the precision for a scope and restores the previous one (tests, evaluation code).
class ComputePrecisionGuard {
 public:
  explicit ComputePrecisionGuard(ComputePrecision p) : previous_(compute_precision()) {
    set_compute_precision(p);
  }
  ~ComputePrecisionGuard() { set_compute_precision(previous_); }
  ComputePrecisionGuard(const ComputePrecisionGuard&) = delete;
  ComputePrecisionGuard& operator=(const ComputePrecisionGuard&) = delete;

 private:
  ComputePrecision previous_;
};

// A float32 copy of t (any device, any strides) with every element rounded to p; contiguous.
// For FP32 the values are copied unchanged.
Tensor round_to_precision(const Tensor& t, ComputePrecision p);
// Rounds a contiguous float32 tensor in place.
void round_to_precision_(Tensor& t, ComputePrecision p);

// ---------------------------------------------------------------- scalar conversions
// One definition for the CPU and the CUDA cast kernels, so both round bit for bit alike.

MT_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MT_HOST_DEVICE inline float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// bfloat16 is the upper half of a float32. Adding 0x7FFF plus the lowest kept bit rounds the
// dropped half to nearest, ties to even; a carry out of the significand bumps the exponent,
// which also turns values beyond the largest bf16 into Inf. NaNs stay (quiet) NaNs.
MT_HOST_DEVICE inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

MT_HOST_DEVICE inline float bf16_bits_to_float(uint16_t h) { return float_from_bits(uint32_t(h) << 16); }

MT_HOST_DEVICE inline uint16_t float_to_fp16_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;  // magnitude bits
  if (a > 0x7F800000u) return sign | 0x7E00u;       // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;      // >= 65520: rounds past 65504 to Inf
  if (a < 0x38800000u) {                            // below 2^-14: fp16 subnormal or zero
    const uint32_t e = a >> 23;
    if (e < 102) return sign;                       // below 2^-25 (float subnormals too): zero
    // The value is sig * 2^(e-150); in units of fp16's 2^-24 that is sig >> (126 - e).
    const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u, shift = 126 - e;  // 14..24
    uint32_t m = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (m & 1u))) ++m;  // m == 0x400 is the smallest normal
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias the exponent (127 -> 15) and keep 10 of the 23 significand bits.
  uint32_t h = ((((a >> 23) - 112u) << 10) | ((a & 0x7FFFFFu) >> 13));
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | h);
}

MT_HOST_DEVICE inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return float_from_bits(float_bits(v) | sign);
  }
  if (e == 31) return float_from_bits(sign | 0x7F800000u | (m << 13));  // Inf, NaN
  return float_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

MT_HOST_DEVICE inline float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }
MT_HOST_DEVICE inline float round_to_fp16(float f) { return fp16_bits_to_float(float_to_fp16_bits(f)); }

MT_HOST_DEVICE inline float round_to(ComputePrecision p, float f) {
  return p == ComputePrecision::BF16 ? round_to_bf16(f) : p == ComputePrecision::FP16 ? round_to_fp16(f) : f;
}

}  // namespace mt::core
