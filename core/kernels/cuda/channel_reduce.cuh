// Per-channel sums over many blocks. Batch-norm statistics and gradients and the bias gradients
// sum, for every channel, all the elements of the batch that belong to it: x viewed as [n, c, s]
// (s pixels per channel and sample, 1 for [N, C]), channel ch owning x[(i*c + ch)*s + p]. One
// block per channel leaves most of a GPU idle when there are few channels and many elements
// (a first layer's 3 or 16 channels over a batch of 224 x 224 images), so each channel's
// elements are cut into `splits` contiguous slices, one block each:
//   pass 1 (channel_partial_sums): block (ch, b) sums its slice in double -> partial[ch][b][t];
//   pass 2 (the caller's kernel, one thread per channel): sum_partials adds the slices in order.
// Both passes have a fixed order, so the result does not depend on scheduling (no atomics), and
// it is the same on every run.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

struct ChannelLayout {
  int64_t n, c, s;
  __host__ __device__ int64_t count() const { return n * s; }  // elements per channel
  // Element k (0 <= k < count) of channel ch.
  __host__ __device__ int64_t offset(int64_t ch, int64_t k) const { return ((k / s) * c + ch) * s + k % s; }
};

constexpr int kChannelThreads = 512;

// Blocks per channel: enough for about 1024 blocks in all, and at least 4 elements per thread
// in each (a slice smaller than that costs more to launch than to sum). A pure function of the
// shape: the same on every GPU.
inline int channel_splits(const ChannelLayout& L) {
  if (L.c <= 0) return 1;
  const int64_t by_blocks = std::max<int64_t>(1, 1024 / L.c);
  const int64_t by_work = std::max<int64_t>(1, L.count() / (4 * kChannelThreads));
  return static_cast<int>(std::min(by_blocks, by_work));
}

// partial[(ch * splits + b) * T + t] = sum over slice b of channel ch of the t-th value that
// term(ch, offset, values) adds into values[0..T). Grid: c * splits blocks of kChannelThreads.
template <int T, typename Term>
__global__ void channel_partial_sums(ChannelLayout L, int splits, Term term, double* partial) {
  __shared__ double shared[kWarp];
  const int64_t ch = blockIdx.x / splits, b = blockIdx.x % splits;
  const int64_t per = (L.count() + splits - 1) / splits;
  const int64_t begin = b * per, end = begin + per < L.count() ? begin + per : L.count();
  double acc[T] = {};
  for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) term(ch, L.offset(ch, k), acc);
  for (int t = 0; t < T; ++t) {
    const double total = block_sum(acc[t], shared);
    if (threadIdx.x == 0) partial[(ch * splits + b) * T + t] = total;
  }
}

// Pass 2: the t-th sum of channel ch, slices added in order.
template <int T>
__device__ inline double sum_partials(const double* partial, int64_t ch, int splits, int t) {
  double s = 0.0;
  for (int b = 0; b < splits; ++b) s += partial[(ch * splits + b) * T + t];
  return s;
}

// Pass 1 on the device, into `partial` (c * splits * T doubles, the caller's scratch); checks the launch.
template <int T, typename Term>
void launch_channel_partial_sums(const ChannelLayout& L, int splits, Term term, double* partial) {
  channel_partial_sums<T><<<static_cast<unsigned>(L.c * splits), kChannelThreads>>>(L, splits, term, partial);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace mt::core::cuda
