// FP16 and BF16: half the bytes, summable (the Gloo allreduce adds 16-bit floats). IEEE binary16
// (subnormals kept, overflow to infinity beyond 65504) or bfloat16 (float32's exponent range, an
// 8-bit significand), both rounded to nearest even; a sum of N values rounds N times. The
// conversions are core/precision.h's, shared with the CUDA kernels (core/kernels/cuda/compress.h,
// cast.h), so both devices write the same bits.
#include "core/precision.h"
#include "dist/compress/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/cast.h"
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

class HalfCompressor final : public Compressor {
 public:
  explicit HalfCompressor(core::ComputePrecision format) : format_(format) {}
  std::string name() const override { return bf16() ? "bf16" : "fp16"; }
  Tensor compress(const Tensor& in) const override {
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return bf16() ? core::cuda::to_reduced(in, format_) : core::cuda::fp16_encode(in.contiguous());
#endif
    const int64_t n = in.numel();
    Tensor out = Tensor::empty({n}, payload_dtype());
    const float* v = in.data<float>();
    auto* h = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) h[i] = bf16() ? core::float_to_bf16_bits(v[i]) : core::float_to_fp16_bits(v[i]);
    return out;
  }
  Tensor decompress(const Tensor& payload, int64_t numel) const override {
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda() && !bf16()) return core::cuda::fp16_decode(payload, numel);
    if (payload.is_cuda()) {
      Tensor out = Tensor::empty({numel}, core::DType::Float32, payload.device());
      core::cuda::from_reduced(payload.contiguous(), out);
      return out;
    }
#endif
    Tensor out = Tensor::empty({numel});
    const auto* h = static_cast<const uint16_t*>(payload.raw_data());
    float* o = out.data<float>();
    for (int64_t i = 0; i < numel; ++i) o[i] = bf16() ? core::bf16_bits_to_float(h[i]) : core::fp16_bits_to_float(h[i]);
    return out;
  }
  bool summable() const override { return true; }
  core::DType payload_dtype() const override { return core::storage_dtype(format_); }
  int64_t payload_numel(int64_t numel) const override { return numel; }

 private:
  bool bf16() const { return format_ == core::ComputePrecision::BF16; }
  core::ComputePrecision format_;
};

}  // namespace

std::unique_ptr<Compressor> make_fp16_compressor() {
  return std::make_unique<HalfCompressor>(core::ComputePrecision::FP16);
}
std::unique_ptr<Compressor> make_bf16_compressor() {
  return std::make_unique<HalfCompressor>(core::ComputePrecision::BF16);
}

}  // namespace mt::dist
