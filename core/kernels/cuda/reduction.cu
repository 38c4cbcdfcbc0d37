// Reductions. sum_dims reorders x as [kept..., reduced...] like the CPU kernel, so each output
// element sums one contiguous run; runs are summed in double (as on the CPU), by a warp per
// output element, or by a whole block when there are few long runs (a full sum).
#include "core/kernels/cuda/elementwise.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/reduction.h"

namespace mt::core::cuda {

namespace {

constexpr int kWarpsPerBlock = kThreads / kWarp;

__global__ void sum_runs_warp(const float* x, float* out, int64_t outer, int64_t run) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; row < outer; row += warps) {
    const float* p = x + row * run;
    double acc = 0.0;
    for (int64_t j = lane; j < run; j += kWarp) acc += p[j];
    acc = warp_sum(acc);
    if (lane == 0) out[row] = static_cast<float>(acc);
  }
}

__global__ void sum_runs_block(const float* x, float* out, int64_t outer, int64_t run) {
  __shared__ double shared[kWarp];
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const float* p = x + row * run;
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < run; j += blockDim.x) acc += p[j];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) out[row] = static_cast<float>(acc);
  }
}

// One thread per (outer, inner) line: the first strict maximum, as in the CPU loop (a NaN
// compares false, so it is skipped unless it is the first element).
__global__ void argmax_lines(const float* x, int64_t* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t lines = outer * inner;
  for (int64_t l = first_index(); l < lines; l += grid_stride()) {
    const int64_t o = l / inner, i = l % inner;
    const float* base = x + o * n * inner + i;
    int64_t best = 0;
    float best_v = base[0];
    for (int64_t k = 1; k < n; ++k) {
      const float v = base[k * inner];
      if (v > best_v) {
        best = k;
        best_v = v;
      }
    }
    out[l] = best;
  }
}

}  // namespace

void sum_dims(const Tensor& x, const std::vector<bool>& reduce, Tensor& out) {
  const int64_t nd = x.dim();
  Shape perm_shape, perm_strides;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduce[d]) { perm_shape.push_back(x.shape()[d]); perm_strides.push_back(x.strides()[d]); }
  for (int64_t d = 0; d < nd; ++d)
    if (reduce[d]) { perm_shape.push_back(x.shape()[d]); perm_strides.push_back(x.strides()[d]); }
  Tensor perm = make_view(x, perm_shape, perm_strides, x.offset());
  if (!perm.is_contiguous()) {
    Tensor c = Tensor::empty(perm_shape, x.dtype(), x.device());
    copy(perm, c);
    perm = c;
  }
  const int64_t outer = out.numel();
  if (outer == 0) return;
  const int64_t run = x.numel() / outer;
  if (run == 0) {  // summing over an empty dimension gives zeros
    fill(out, 0.0);
    return;
  }
  // Few long runs would leave most of the GPU idle with a warp each; give each a block.
  if (run >= 8192 && outer <= 1024) {
    sum_runs_block<<<static_cast<unsigned>(outer), 1024>>>(perm.data<float>(), out.data<float>(), outer, run);
  } else {
    sum_runs_warp<<<blocks_for(outer * kWarp), kThreads>>>(perm.data<float>(), out.data<float>(), outer, run);
  }
  MT_CUDA_LAUNCH_CHECK();
}

void argmax_dim(const Tensor& x, int64_t dim, Tensor& indices) {
  Tensor xc = x.contiguous();
  int64_t outer = 1, inner = 1;
  const int64_t n = x.shape()[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  if (outer * inner == 0) return;
  argmax_lines<<<blocks_for(outer * inner), kThreads>>>(xc.data<float>(), indices.data<int64_t>(),
                                                        outer, n, inner);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace mt::core::cuda
