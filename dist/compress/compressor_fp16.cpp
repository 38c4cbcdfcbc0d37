// FP16: half the bytes, summable (the Gloo allreduce adds halves). IEEE binary16, round to
// nearest even, subnormals kept, overflow to infinity (beyond 65504: fine for gradients, which
// are averaged after the sum; a sum of N halves rounds N times). The conversions are
// core/precision.h's, shared with the CUDA kernels (core/kernels/cuda/compress.h), so both
// devices write the same bits.
#include "core/precision.h"
#include "dist/compress/compressor.h"

#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/compress.h"
#endif

namespace mt::dist {
namespace {

class Fp16Compressor final : public Compressor {
 public:
  std::string name() const override { return "fp16"; }
  Tensor compress(const Tensor& in) const override {
#ifdef MT_CUDA_KERNELS
    if (in.is_cuda()) return core::cuda::fp16_encode(in.contiguous());
#endif
    const int64_t n = in.numel();
    Tensor out = Tensor::empty({n}, core::DType::Float16);
    const float* v = in.data<float>();
    auto* h = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) h[i] = core::float_to_fp16_bits(v[i]);
    return out;
  }
  Tensor decompress(const Tensor& payload, int64_t numel) const override {
#ifdef MT_CUDA_KERNELS
    if (payload.is_cuda()) return core::cuda::fp16_decode(payload, numel);
#endif
    Tensor out = Tensor::empty({numel});
    const auto* h = static_cast<const uint16_t*>(payload.raw_data());
    float* o = out.data<float>();
    for (int64_t i = 0; i < numel; ++i) o[i] = core::fp16_bits_to_float(h[i]);
    return out;
  }
  bool summable() const override { return true; }
  core::DType payload_dtype() const override { return core::DType::Float16; }
  int64_t payload_numel(int64_t numel) const override { return numel; }
};

}  // namespace

std::unique_ptr<Compressor> make_fp16_compressor() { return std::make_unique<Fp16Compressor>(); }

}  // namespace mt::dist
