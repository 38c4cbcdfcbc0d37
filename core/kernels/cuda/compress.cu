// CUDA kernels of the gradient compressors; the payload layouts are compress.h's. The bit
// packers give each warp 32 consecutive values (coalesced loads) and build the words with warp
// shuffles or a ballot, so a warp's loop condition depends only on its first index (kThreads
// and the grid stride are multiples of 32) and every lane reaches the shuffles.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include "core/error.h"
#include "core/kernels/cuda/compress.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/precision.h"

namespace mt::core::cuda {

namespace {

static_assert(kSignSumLanes == kWarp, "SIGN's summation order gives one lane per partial sum");
constexpr unsigned kFullMask = 0xffffffffu;

Tensor bytes_on(int64_t bytes, Device device) { return Tensor::empty({bytes}, DType::UInt8, device); }

// One CUB device-wide algorithm, `call(temp, bytes)`: the first call (temp null) sizes its
// temporary storage, taken from the caching allocator (at least one byte: a zero-size tensor
// may have no address); the second runs it.
template <typename Call>
void cub_run(Device device, Call call) {
  size_t bytes = 0;
  MT_CUDA_CHECK(call(nullptr, bytes));
  Tensor temp = bytes_on(static_cast<int64_t>(std::max<size_t>(bytes, 1)), device);
  MT_CUDA_CHECK(call(temp.raw_data(), bytes));
}

const float* floats_of(const Tensor& in, const char* what) {
  MT_CHECK(in.is_cuda() && in.dtype() == DType::Float32 && in.is_contiguous(), "internal: ", what,
           " needs a contiguous float32 CUDA tensor, got ", in.str());
  return static_cast<const float*>(in.raw_data());
}

// The payload's bytes as a tensor whose data is 4-byte aligned: a payload cut out of an
// allgather buffer (narrow) starts at an offset that is a multiple of 4 for every layout here,
// but a caller's own tensor may not, and the kernels read 32-bit words.
Tensor aligned_payload(const Tensor& payload, int64_t min_bytes, const char* what) {
  MT_CHECK(payload.is_cuda() && payload.dtype() == DType::UInt8 && payload.numel() >= min_bytes,
           "internal: ", what, " decode needs a CUDA uint8 payload of at least ", min_bytes,
           " bytes, got ", payload.str());
  Tensor p = payload.contiguous();
  if (reinterpret_cast<uintptr_t>(p.raw_data()) % 4 != 0) p = p.clone();
  return p;
}

// ---------------------------------------------------------------- FP16

__global__ void fp16_encode_kernel(const float* v, uint16_t* h, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) h[i] = float_to_fp16_bits(v[i]);
}

__global__ void fp16_decode_kernel(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = fp16_bits_to_float(h[i]);
}

// ---------------------------------------------------------------- TWO_BIT

__global__ void two_bit_encode_kernel(const float* v, uint32_t* words, int64_t n, float tau) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t i = first_index(); i - lane < n; i += grid_stride()) {
    uint32_t code = 0;
    if (i < n) {
      const float x = v[i];
      code = x >= tau ? 1u : (x <= -tau ? 2u : 0u);
    }
    // OR the 16 lanes of each half-warp together: one word per half.
    uint32_t bits = code << (2 * (lane % 16));
    for (int o = 8; o > 0; o >>= 1) bits |= __shfl_xor_sync(kFullMask, bits, o);
    if (lane % 16 == 0 && i < n) words[i / 16] = bits;
  }
}

__global__ void two_bit_decode_kernel(const uint32_t* words, float* out, int64_t n, float tau) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const uint32_t code = (words[i / 16] >> (2 * (i % 16))) & 3u;
    out[i] = code == 1u ? tau : (code == 2u ? -tau : 0.0f);
  }
}

// ---------------------------------------------------------------- SIGN

__global__ void sign_bits_kernel(const float* v, uint32_t* words, int64_t n) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (int64_t i = first_index(); i - lane < n; i += grid_stride()) {
    const unsigned negative = __ballot_sync(kFullMask, i < n && v[i] < 0.0f);
    if (lane == 0) words[i / 32] = negative;  // lane 0's i is the warp's first, below n
  }
}

// One warp per block of kSignSumBlock values, in compress.h's order.
__global__ void abs_block_sums_kernel(const float* v, int64_t n, double* sums, int64_t blocks) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t warps = grid_stride() / kWarp;
  for (int64_t b = first_index() / kWarp; b < blocks; b += warps) {
    const int64_t begin = b * kSignSumBlock;
    const int64_t end = begin + kSignSumBlock < n ? begin + kSignSumBlock : n;
    double partial = 0.0;
    for (int64_t j = begin + lane; j < end; j += kWarp) partial += static_cast<double>(fabsf(v[j]));
    double block = 0.0;
    for (int l = 0; l < kWarp; ++l) block += __shfl_sync(kFullMask, partial, l);
    if (lane == 0) sums[b] = block;
  }
}

// The block sums in block order, one thread: a few thousand additions even for 25M values.
__global__ void sign_scale_kernel(const double* sums, int64_t blocks, int64_t n, float* scale) {
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total += sums[b];
  *scale = static_cast<float>(total / static_cast<double>(n));
}

__global__ void sign_decode_kernel(const uint32_t* words, const float* scale_at, float* out, int64_t n) {
  const float scale = *scale_at;
  for (int64_t i = first_index(); i < n; i += grid_stride())
    out[i] = (words[i / 32] >> (i % 32)) & 1u ? -scale : scale;
}

// ---------------------------------------------------------------- TOPK

// |v| as uint32 bits: for non-negative floats the unsigned order is the numeric order.
__device__ inline uint32_t magnitude_key(float x) { return float_bits(fabsf(x)); }

__global__ void sample_keys_kernel(const float* v, int64_t stride, int64_t count, uint32_t* keys) {
  for (int64_t j = first_index(); j < count; j += grid_stride()) keys[j] = magnitude_key(v[j * stride]);
}

// The CPU's threshold: the sample's (pos+1)-th largest |v|, times 0.8.
__global__ void threshold_kernel(const uint32_t* sorted_desc, int64_t pos, float* threshold) {
  *threshold = __fmul_rn(float_from_bits(sorted_desc[pos]), 0.8f);
}

struct AboveThreshold {
  const float* v;
  const float* threshold;
  __device__ bool operator()(int i) const { return fabsf(v[i]) >= *threshold; }
};

__global__ void iota_kernel(int32_t* idx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) idx[i] = static_cast<int32_t>(i);
}

__global__ void candidate_keys_kernel(const float* v, const int32_t* idx, int64_t count, uint32_t* keys) {
  for (int64_t j = first_index(); j < count; j += grid_stride()) keys[j] = magnitude_key(v[idx[j]]);
}

__global__ void gather_kernel(const float* v, const int32_t* idx, int64_t k, float* values) {
  for (int64_t j = first_index(); j < k; j += grid_stride()) values[j] = v[idx[j]];
}

__global__ void scatter_kernel(const float* values, const int32_t* idx, int64_t k, float* out, int64_t n) {
  for (int64_t j = first_index(); j < k; j += grid_stride()) {
    const int32_t i = idx[j];
    if (i >= 0 && i < n) out[i] = values[j];  // a corrupt index is dropped, as on the CPU
  }
}

// Indices `candidates[0, count)` (ascending) cut to the k of largest |v|. The radix sort is
// stable, so among equal magnitudes the lower index comes first: the CPU's tie rule. Writes
// the k indices, ascending, to `chosen`.
void keep_largest(const float* v, const int32_t* candidates, int64_t count, int64_t k, int64_t n,
                  int32_t* chosen, Device dev) {
  Tensor keys = bytes_on(4 * count, dev), keys_sorted = bytes_on(4 * count, dev);
  Tensor idx_sorted = bytes_on(4 * count, dev);
  auto* kin = static_cast<uint32_t*>(keys.raw_data());
  auto* kout = static_cast<uint32_t*>(keys_sorted.raw_data());
  auto* iout = static_cast<int32_t*>(idx_sorted.raw_data());
  launch(candidate_keys_kernel, blocks_for(count), v, candidates, count, kin);
  cub_run(dev, [&](void* temp, size_t& bytes) {
    return cub::DeviceRadixSort::SortPairsDescending(temp, bytes, kin, kout, candidates, iout,
                                                     static_cast<int>(count), 0, 32, cudaStream_t{nullptr});
  });
  // Back to ascending index order; indices are below n, so only their low bits are sorted.
  int end_bit = 1;
  while (end_bit < 31 && (int64_t{1} << end_bit) < n) ++end_bit;
  cub_run(dev, [&](void* temp, size_t& bytes) {
    return cub::DeviceRadixSort::SortKeys(temp, bytes, iout, chosen, static_cast<int>(k), 0, end_bit,
                                          cudaStream_t{nullptr});
  });
}

}  // namespace

// ---------------------------------------------------------------- entry points

Tensor fp16_encode(const Tensor& in) {
  const float* v = floats_of(in, "FP16 encode");
  const int64_t n = in.numel();
  Tensor out = Tensor::empty({n}, DType::Float16, in.device());
  if (n == 0) return out;
  launch(fp16_encode_kernel, blocks_for(n), v, static_cast<uint16_t*>(out.raw_data()), n);
  return out;
}

Tensor fp16_decode(const Tensor& payload, int64_t numel) {
  MT_CHECK(payload.is_cuda() && payload.dtype() == DType::Float16 && payload.numel() >= numel,
           "internal: FP16 decode needs a CUDA float16 payload of ", numel, " values, got ", payload.str());
  const Tensor p = payload.contiguous();
  Tensor out = Tensor::empty({numel}, DType::Float32, p.device());
  if (numel == 0) return out;
  launch(fp16_decode_kernel, blocks_for(numel), static_cast<const uint16_t*>(p.raw_data()),
         static_cast<float*>(out.raw_data()), numel);
  return out;
}

Tensor two_bit_encode(const Tensor& in, float tau) {
  const float* v = floats_of(in, "TWO_BIT encode");
  const int64_t n = in.numel();
  Tensor out = bytes_on(4 * ((n + 15) / 16), in.device());
  if (n == 0) return out;
  launch(two_bit_encode_kernel, blocks_for(n), v, static_cast<uint32_t*>(out.raw_data()), n, tau);
  return out;
}

Tensor two_bit_decode(const Tensor& payload, int64_t numel, float tau) {
  const Tensor p = aligned_payload(payload, 4 * ((numel + 15) / 16), "TWO_BIT");
  Tensor out = Tensor::empty({numel}, DType::Float32, p.device());
  if (numel == 0) return out;
  launch(two_bit_decode_kernel, blocks_for(numel), static_cast<const uint32_t*>(p.raw_data()),
         static_cast<float*>(out.raw_data()), numel, tau);
  return out;
}

Tensor sign_encode(const Tensor& in) {
  const float* v = floats_of(in, "SIGN encode");
  const int64_t n = in.numel();
  const Device dev = in.device();
  Tensor out = bytes_on(4 + 4 * ((n + 31) / 32), dev);
  auto* scale = static_cast<float*>(out.raw_data());
  if (n == 0) {
    MT_CUDA_CHECK(cudaMemsetAsync(scale, 0, 4, nullptr));  // scale 0, as on the CPU
    return out;
  }
  const int64_t blocks = (n + kSignSumBlock - 1) / kSignSumBlock;
  // The block sums are doubles, held in a byte tensor (the tensor library has no float64).
  Tensor sums = bytes_on(8 * blocks, dev);
  auto* block_sums = static_cast<double*>(sums.raw_data());
  launch(abs_block_sums_kernel, blocks_for(blocks * kWarp), v, n, block_sums, blocks);
  sign_scale_kernel<<<1, 1>>>(block_sums, blocks, n, scale);
  MT_CUDA_LAUNCH_CHECK();
  auto* words = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out.raw_data()) + 4);
  launch(sign_bits_kernel, blocks_for(n), v, words, n);
  return out;
}

Tensor sign_decode(const Tensor& payload, int64_t numel) {
  const Tensor p = aligned_payload(payload, 4 + 4 * ((numel + 31) / 32), "SIGN");
  Tensor out = Tensor::empty({numel}, DType::Float32, p.device());
  if (numel == 0) return out;
  const auto* bytes = static_cast<const uint8_t*>(p.raw_data());
  launch(sign_decode_kernel, blocks_for(numel), reinterpret_cast<const uint32_t*>(bytes + 4),
         reinterpret_cast<const float*>(bytes),
         static_cast<float*>(out.raw_data()), numel);
  return out;
}

Tensor topk_encode(const Tensor& in, int64_t k) {
  const float* v = floats_of(in, "TOPK encode");
  const int64_t n = in.numel();
  const Device dev = in.device();
  MT_CHECK(k >= 0 && k <= n, "internal: TOPK encode of k = ", k, " out of ", n, " values");
  MT_CHECK(n <= INT_MAX, "TOPK compression of ", n, " values: its indices are int32, so a buffer holds at "
           "most ", INT_MAX, " values; compress the gradients in several buffers");
  Tensor out = bytes_on(8 * k, dev);
  if (k == 0) return out;
  auto* values = static_cast<float*>(out.raw_data());
  auto* chosen = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(out.raw_data()) + 4 * k);

  // 1. The threshold estimate, exactly as the CPU computes it: the sample at a fixed stride,
  //    its ceil(k/n * size)-th largest |v|, times 0.8.
  const int64_t stride = std::max<int64_t>(1, n / 1024);
  const int64_t sample_size = (n + stride - 1) / stride;
  const auto ks = static_cast<int64_t>(
      std::ceil(static_cast<double>(k) / static_cast<double>(n) * static_cast<double>(sample_size)));
  const int64_t pos = std::clamp<int64_t>(ks, 1, sample_size) - 1;
  Tensor sample = bytes_on(4 * sample_size, dev), sample_sorted = bytes_on(4 * sample_size, dev);
  launch(sample_keys_kernel, blocks_for(sample_size), v, stride, sample_size,
         static_cast<uint32_t*>(sample.raw_data()));
  cub_run(dev, [&](void* temp, size_t& bytes) {
    return cub::DeviceRadixSort::SortKeysDescending(temp, bytes, static_cast<const uint32_t*>(sample.raw_data()),
                                                    static_cast<uint32_t*>(sample_sorted.raw_data()),
                                                    static_cast<int>(sample_size), 0, 32, cudaStream_t{nullptr});
  });
  Tensor threshold = bytes_on(4, dev);
  auto* thr = static_cast<float*>(threshold.raw_data());
  threshold_kernel<<<1, 1>>>(static_cast<const uint32_t*>(sample_sorted.raw_data()), pos, thr);
  MT_CUDA_LAUNCH_CHECK();

  // 2. Candidates |v| >= threshold, compacted in ascending index order.
  Tensor candidates = bytes_on(4 * n, dev), selected = bytes_on(4, dev);
  auto* cand = static_cast<int32_t*>(candidates.raw_data());
  auto* count_on_device = static_cast<int*>(selected.raw_data());
  const thrust::counting_iterator<int> all_indices(0);
  const AboveThreshold above{v, thr};
  cub_run(dev, [&](void* temp, size_t& bytes) {
    return cub::DeviceSelect::If(temp, bytes, all_indices, cand, count_on_device, static_cast<int>(n), above,
                                 cudaStream_t{nullptr});
  });
  int count = 0;
  MT_CUDA_CHECK(cudaMemcpy(&count, count_on_device, sizeof count, cudaMemcpyDeviceToHost));

  // 3. Exactly k: too few candidates (the sample misled us) means an exact selection over all
  //    values; too many are cut by magnitude.
  if (count < k) {
    launch(iota_kernel, blocks_for(n), cand, n);
    count = static_cast<int>(n);
  }
  if (count > k) {
    keep_largest(v, cand, count, k, n, chosen, dev);
  } else {
    MT_CUDA_CHECK(cudaMemcpyAsync(chosen, cand, 4 * static_cast<size_t>(k), cudaMemcpyDeviceToDevice, nullptr));
  }
  launch(gather_kernel, blocks_for(k), v, chosen, k, values);
  return out;
}

Tensor topk_decode(const Tensor& payload, int64_t numel, int64_t k) {
  const Tensor p = aligned_payload(payload, 8 * k, "TOPK");
  Tensor out = Tensor::zeros({numel}, DType::Float32, p.device());
  if (k == 0 || numel == 0) return out;
  const auto* bytes = static_cast<const uint8_t*>(p.raw_data());
  launch(scatter_kernel, blocks_for(k), reinterpret_cast<const float*>(bytes),
         reinterpret_cast<const int32_t*>(bytes + 4 * k), k,
         static_cast<float*>(out.raw_data()), numel);
  return out;
}

}  // namespace mt::core::cuda
