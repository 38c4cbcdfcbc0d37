// Reductions. sum_dims sums in double, as the CPU does. It views x (size-1 dims dropped,
// neighbours of the same kind merged) as [outer, run, inner] with the run reduced:
//   inner == 1 (the reduced dims last): row sums, a warp per row, or blocks per row;
//   inner > 1 (kept dims after the reduced ones: a broadcast's gradient over leading dims):
//     column sums, a thread per column reading neighbouring columns together (coalesced).
// Few outputs over long runs would leave most of the GPU idle (a full sum, a parameter's squared
// norm), so the runs are cut into chunks whose partial sums (double) a second pass adds, itself
// a reduction of the same kind. Every pass has a fixed order (no atomics): a shape sums the same
// way on every run. Other layouts (kept dims on both sides of reduced ones, strided views) are
// copied to [kept..., reduced...] first, like the CPU kernel does.
#include <algorithm>

#include "core/kernels/cuda/elementwise.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/reduction.h"

namespace mt::core::cuda {

namespace {

// About the threads a large GPU keeps resident (an H100: 132 SMs x 2048): fewer outputs than
// this get their runs chunked.
constexpr int64_t kFillThreads = int64_t{1} << 18;
// A row shorter than this is one warp's work; longer rows of few outputs get blocks.
constexpr int64_t kShortRow = 1024;
// The least work per thread in a chunk (elements of a row chunk, rows of a column chunk):
// smaller chunks cost more in partial sums than they save.
constexpr int64_t kRowChunkPerThread = 16, kColChunkRows = 32;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
unsigned grid_for(int64_t blocks) { return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20)); }

// out[row] = x[row, 0..run) summed by one warp.
template <typename In, typename Out>
__global__ void sum_rows_warp(const In* x, Out* out, int64_t outer, int64_t run) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t row = first_warp(); row < outer; row += warp_stride()) {
    const In* p = x + row * run;
    double acc = 0.0;
    for (int64_t j = lane; j < run; j += kWarp) acc += p[j];
    acc = warp_sum(acc);
    if (lane == 0) out[row] = static_cast<Out>(acc);
  }
}

// out[row * chunks + c] = x[row, c * per .. (c + 1) * per) summed by one block.
template <typename In, typename Out>
__global__ void sum_row_chunks(const In* x, Out* out, int64_t outer, int64_t run, int64_t chunks, int64_t per) {
  __shared__ double shared[kWarp];
  for (int64_t b = blockIdx.x; b < outer * chunks; b += gridDim.x) {
    const int64_t row = b / chunks, begin = (b % chunks) * per;
    const int64_t end = begin + per < run ? begin + per : run;
    const In* p = x + row * run;
    // Four loads in flight per thread: one at a time leaves the memory system mostly idle.
    const int64_t step = blockDim.x;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int64_t j = begin + threadIdx.x;
    for (; j + 3 * step < end; j += 4 * step) {
      a0 += p[j];
      a1 += p[j + step];
      a2 += p[j + 2 * step];
      a3 += p[j + 3 * step];
    }
    for (; j < end; j += step) a0 += p[j];
    const double acc = block_sum((a0 + a1) + (a2 + a3), shared);
    if (threadIdx.x == 0) out[b] = static_cast<Out>(acc);
  }
}

// x is [outer, run, inner]; out[(o * chunks + c) * inner + i] sums x[o, c * per .. (c + 1) * per, i].
// Neighbouring threads take neighbouring i, so each row of a chunk is read in whole segments.
template <typename In, typename Out>
__global__ void sum_col_chunks(const In* x, Out* out, int64_t outer, int64_t run, int64_t inner, int64_t chunks,
                               int64_t per) {
  const int64_t n = outer * chunks * inner;
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t i = t % inner, oc = t / inner, begin = (oc % chunks) * per, o = oc / chunks;
    const int64_t end = begin + per < run ? begin + per : run;
    const In* p = x + o * run * inner + i;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;  // four loads in flight, as in sum_row_chunks
    int64_t r = begin;
    for (; r + 3 < end; r += 4) {
      a0 += p[r * inner];
      a1 += p[(r + 1) * inner];
      a2 += p[(r + 2) * inner];
      a3 += p[(r + 3) * inner];
    }
    for (; r < end; ++r) a0 += p[r * inner];
    out[t] = static_cast<Out>((a0 + a1) + (a2 + a3));
  }
}

// Scratch for n partial sums: doubles in float32 storage (twice the count), from the caching allocator.
double* partials(Tensor& scratch, int64_t n, const Device& device) {
  scratch = Tensor::empty({2 * n}, DType::Float32, device);
  return static_cast<double*>(scratch.raw_data());
}

// out[o] = sum of x[o, 0..run).
template <typename In, typename Out>
void sum_rows(const In* x, Out* out, int64_t outer, int64_t run, const Device& device) {
  if (run <= kShortRow || outer * kWarp >= kFillThreads) {
    launch(sum_rows_warp<In, Out>, blocks_for(outer * kWarp), x, out, outer, run);
    return;
  }
  const int64_t chunks = std::min(ceil_div(kFillThreads, outer * kThreads), ceil_div(run, kThreads * kRowChunkPerThread));
  if (chunks <= 1) {
    launch(sum_row_chunks<In, Out>, grid_for(outer), x, out, outer, run, 1, run);
    return;
  }
  Tensor scratch;
  double* partial = partials(scratch, outer * chunks, device);
  launch(sum_row_chunks<In, double>, grid_for(outer * chunks), x, partial, outer, run, chunks, ceil_div(run, chunks));
  sum_rows(static_cast<const double*>(partial), out, outer, chunks, device);  // [outer, chunks]
}

// out[o, i] = sum of x[o, 0..run, i].
template <typename In, typename Out>
void sum_cols(const In* x, Out* out, int64_t outer, int64_t run, int64_t inner, const Device& device) {
  const int64_t cols = outer * inner;
  const int64_t chunks = cols >= kFillThreads ? 1 : std::min(ceil_div(kFillThreads, cols), ceil_div(run, kColChunkRows));
  if (chunks <= 1) {
    launch(sum_col_chunks<In, Out>, blocks_for(cols), x, out, outer, run, inner, 1, run);
    return;
  }
  Tensor scratch;
  double* partial = partials(scratch, cols * chunks, device);
  launch(sum_col_chunks<In, double>, blocks_for(cols * chunks), x, partial, outer, run, inner, chunks,
         ceil_div(run, chunks));
  sum_cols(static_cast<const double*>(partial), out, outer, chunks, inner, device);  // [outer, chunks, inner]
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

// x as [outer, run, inner] (run reduced) when it is dense and its reduced dims are one block:
// size-1 dims dropped, neighbouring dims of the same kind merged. False for other layouts.
bool as_outer_run_inner(const Tensor& x, const std::vector<bool>& reduce, int64_t& outer, int64_t& run,
                        int64_t& inner) {
  struct Group {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Group> groups;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.shape()[d], stride = x.strides()[d];
    if (size == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduce[d] && groups.back().stride == size * stride) {
      groups.back().size *= size;
      groups.back().stride = stride;
    } else {
      groups.push_back({size, stride, static_cast<bool>(reduce[d])});
    }
  }
  int64_t dense = 1;  // each group's stride must be the elements of the groups after it
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    if (g->stride != dense) return false;
    dense *= g->size;
  }
  outer = run = inner = 1;
  size_t k = 0;
  if (k < groups.size() && !groups[k].reduced) outer = groups[k++].size;
  if (k < groups.size() && groups[k].reduced) run = groups[k++].size;
  if (k < groups.size() && !groups[k].reduced) inner = groups[k++].size;
  return k == groups.size();
}

}  // namespace

void sum_dims(const Tensor& x, const std::vector<bool>& reduce, Tensor& out) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // summing over an empty dimension gives zeros
    fill(out, 0.0);
    return;
  }
  int64_t outer, run, inner;
  Tensor src = x;
  if (!as_outer_run_inner(x, reduce, outer, run, inner)) {
    const int64_t nd = x.dim();
    Shape perm_shape, perm_strides;
    for (int64_t d = 0; d < nd; ++d)
      if (!reduce[d]) { perm_shape.push_back(x.shape()[d]); perm_strides.push_back(x.strides()[d]); }
    for (int64_t d = 0; d < nd; ++d)
      if (reduce[d]) { perm_shape.push_back(x.shape()[d]); perm_strides.push_back(x.strides()[d]); }
    src = Tensor::empty(perm_shape, x.dtype(), x.device());
    copy(make_view(x, perm_shape, perm_strides, x.offset()), src);
    outer = out.numel();
    run = x.numel() / outer;
    inner = 1;
  }
  if (run == 1) {  // nothing reduced: a copy, a thread per element
    inner *= outer;
    outer = 1;
  }
  if (inner == 1) sum_rows(src.data<float>(), out.data<float>(), outer, run, x.device());
  else sum_cols(src.data<float>(), out.data<float>(), outer, run, inner, x.device());
}

void argmax_dim(const Tensor& x, int64_t dim, Tensor& indices) {
  Tensor xc = x.contiguous();
  const int64_t outer = outer_size(x.shape(), dim), inner = inner_size(x.shape(), dim), n = x.shape()[dim];
  if (outer * inner == 0) return;
  launch(argmax_lines, blocks_for(outer * inner), xc.data<float>(), indices.data<int64_t>(),
         outer, n, inner);
}

}  // namespace mt::core::cuda
