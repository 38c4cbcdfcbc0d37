// Launch helpers shared by the CUDA kernels (CUDA sources only).
//
// Every kernel runs on the legacy default stream (stream 0), as do the copies in
// core/cuda/caching_allocator.cpp: one stream orders everything, so a block the caching
// allocator hands out again is never still in use by an earlier kernel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"

namespace mt::core::cuda {

constexpr int kThreads = 256;   // threads per block for elementwise work
constexpr int kWarp = 32;

// Blocks for n elements at kThreads per block. Kernels loop grid-stride, so the cap only bounds
// the launch, not the sizes handled.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, int64_t{1} << 20));
}

// A grid-stride loop over [0, n): for (int64_t i : grid_range(n)) is spelled out in kernels as
//   for (int64_t i = first_index(); i < n; i += grid_stride())
__device__ inline int64_t first_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// A warp per row: blocks for `warps` rows, and the grid-stride loop over them spelled
//   for (int64_t i = first_warp(); i < rows; i += warp_stride())
constexpr int kWarpsPerBlock = kThreads / kWarp;
inline unsigned warp_blocks(int64_t warps) { return blocks_for(warps * kWarp); }
__device__ inline int64_t first_warp() { return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; }
__device__ inline int64_t warp_stride() { return int64_t(gridDim.x) * kWarpsPerBlock; }

// Launches are asynchronous; this catches configuration errors at the launch site (faults in
// the kernel itself surface at the next synchronizing call, e.g. a copy to the host).
#define MT_CUDA_LAUNCH_CHECK() MT_CUDA_CHECK(cudaGetLastError())

// kernel<<<blocks, kThreads>>>(args...) on stream 0, checked as above.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), unsigned blocks, Args... args) {
  kernel<<<blocks, kThreads>>>(args...);
  MT_CUDA_LAUNCH_CHECK();
}

// Warp-wide sum (all lanes get the result).
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Warp-wide maximum (all lanes get the result).
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum for blocks of up to 1024 threads (a multiple of 32); every thread gets the
// result. `shared` needs 32 slots. Fixed order: the same launch sums the same way every time.
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}

}  // namespace mt::core::cuda
