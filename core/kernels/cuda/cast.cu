// float32 <-> bfloat16/float16 casts on the GPU, one thread per element (grid-stride). The
// 16-bit values are handled as raw uint16_t bits: the conversions are core/precision.h's
// MT_HOST_DEVICE functions, not CUDA's intrinsics, so the CPU and the GPU round identically.
#include "core/kernels/cuda/cast.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/strided.cuh"

namespace mt::core::cuda {

namespace {

// What one float32 value becomes: the 16-bit format's bits, or float32 rounded to the format.
MT_HOST_DEVICE inline void store(uint16_t& out, ComputePrecision p, float v) {
  out = p == ComputePrecision::BF16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v);
}
MT_HOST_DEVICE inline void store(float& out, ComputePrecision p, float v) { out = round_to(p, v); }

template <typename Out>
__global__ void cast_contiguous(const float* x, Out* out, int64_t n, ComputePrecision p) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) store(out[i], p, x[i]);
}

template <typename Out>
__global__ void cast_strided(const float* x, Out* out, int64_t n, StridedIndexer<1> ix, ComputePrecision p) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    ix.offsets(i, off);
    store(out[i], p, x[off[0]]);
  }
}

__global__ void from_bf16(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = bf16_bits_to_float(h[i]);
}

__global__ void from_fp16(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = fp16_bits_to_float(h[i]);
}

// x's values (float32, any strides) stored for p into dst, contiguous in x's shape.
template <typename Out>
void cast_into(const Tensor& x, Out* dst, ComputePrecision p) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const float* src = static_cast<const float*>(x.raw_data());
  if (x.is_contiguous()) {
    launch(cast_contiguous<Out>, blocks_for(n), src, dst, n, p);
  } else {
    const Shape* st[1] = {&x.strides()};
    launch(cast_strided<Out>, blocks_for(n), src, dst, n, make_indexer<1>(x.shape(), st), p);
  }
}

}  // namespace

Tensor to_reduced(const Tensor& x, ComputePrecision p) {
  MT_CHECK(p != ComputePrecision::FP32 && x.dtype() == DType::Float32 && x.is_cuda(),
           "internal: to_reduced needs a CUDA float32 tensor and a 16-bit precision, got ", x.str());
  Tensor h = Tensor::empty(x.shape(), storage_dtype(p), x.device());
  cast_into(x, static_cast<uint16_t*>(h.raw_data()), p);
  return h;
}

void from_reduced(const Tensor& h, Tensor& out) {
  MT_CHECK((h.dtype() == DType::BFloat16 || h.dtype() == DType::Float16) && h.is_contiguous() &&
               out.dtype() == DType::Float32 && out.is_contiguous() && h.numel() == out.numel(),
           "internal: from_reduced(", h.str(), " -> ", out.str(), ")");
  const int64_t n = h.numel();
  if (n == 0) return;
  const uint16_t* src = static_cast<const uint16_t*>(h.raw_data());
  float* dst = static_cast<float*>(out.raw_data());
  if (h.dtype() == DType::BFloat16)
    launch(from_bf16, blocks_for(n), src, dst, n);
  else
    launch(from_fp16, blocks_for(n), src, dst, n);
}

Tensor rounded_copy(const Tensor& x, ComputePrecision p) {
  MT_CHECK(x.dtype() == DType::Float32 && x.is_cuda(), "internal: rounded_copy of ", x.str());
  Tensor out = Tensor::empty(x.shape(), DType::Float32, x.device());
  cast_into(x, static_cast<float*>(out.raw_data()), p);
  return out;
}

void round_in_place(Tensor& x, ComputePrecision p) {
  MT_CHECK(x.dtype() == DType::Float32 && x.is_cuda() && x.is_contiguous(),
           "internal: round_in_place of ", x.str());
  if (p != ComputePrecision::FP32) cast_into(x, static_cast<float*>(x.raw_data()), p);
}

}  // namespace mt::core::cuda
