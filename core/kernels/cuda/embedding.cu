// Row gathers on the GPU.
//
// Backward must be deterministic, so there are no float atomics: the (index, position) pairs
// are sorted by table row with CUB's radix sort, and each run of equal rows is summed by one
// block, in increasing position, as the CPU kernel does (the two agree bit for bit). Sorting
// costs O(N) in the number of lookups; the alternative without a sort, a block per table row
// scanning all N indices, costs O(rows * N), which for a 30k-token vocabulary is far more.
// Each pair is packed into one unique 64-bit key, row * N + position, so the order of the
// sorted keys is fully determined whatever the sort's stability.
#include <cuda_runtime.h>

#include <bit>
#include <climits>
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/index_checks.h"
#include "core/kernels/cuda/embedding.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {

// An out-of-range index gives a zero row and is reported (core/cuda/index_checks.h).
__global__ void gather_rows(const float* table, const int64_t* idx, float* out, int64_t n, int64_t rows,
                            int64_t d, IndexCheck bad) {
  for (int64_t e = first_index(); e < n * d; e += grid_stride()) {
    const int64_t i = e / d, r = idx[i];
    if (r >= 0 && r < rows) {
      out[e] = table[r * d + e % d];
    } else {
      out[e] = 0.0f;
      if (e % d == 0) bad.report(i, n);
    }
  }
}

__global__ void make_keys(const int64_t* idx, unsigned long long* keys, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    keys[i] = static_cast<unsigned long long>(idx[i]) * static_cast<unsigned long long>(n) + i;
}

__global__ void split_keys(const unsigned long long* keys, int64_t* row, int64_t* pos, int64_t n) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {
    row[j] = static_cast<int64_t>(keys[j] / static_cast<unsigned long long>(n));
    pos[j] = static_cast<int64_t>(keys[j] % static_cast<unsigned long long>(n));
  }
}

// Block per sorted entry that starts a run of equal rows; its threads split the columns and
// each sums the run's gradient rows in sorted (= increasing position) order.
__global__ void run_sums(const int64_t* row, const int64_t* pos, const float* gout, float* gtable, int64_t n,
                         int64_t d) {
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    if (j > 0 && row[j] == row[j - 1]) continue;  // not a run start (same for the whole block)
    const int64_t r = row[j];
    int64_t end = j + 1;
    while (end < n && row[end] == r) ++end;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float s = 0.0f;
      for (int64_t q = j; q < end; ++q) s += gout[pos[q] * d + c];
      gtable[r * d + c] = s;
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& table, const Tensor& indices, Tensor& out) {
  const int64_t n = indices.numel(), rows = table.shape()[0], d = table.shape()[1];
  if (n == 0 || d == 0) return;
  const IndexCheck bad = defer_index_check(indices, [rows](int64_t index, int64_t pos) {
    return "embedding: index " + std::to_string(index) + " at position " + std::to_string(pos) +
           " is out of range for a table of " + std::to_string(rows) + " rows (valid indices are 0.." +
           std::to_string(rows - 1) + "); check the token ids against the vocabulary size";
  });
  launch(gather_rows, blocks_for(n * d), table.data<float>(), indices.data<int64_t>(), out.data<float>(),
         n, rows, d, bad);
}

void embedding_backward(const Tensor& gout, const Tensor& indices, Tensor& gtable) {
  const int64_t n = indices.numel(), rows = gtable.shape()[0], d = gtable.shape()[1];
  MT_CUDA_CHECK(cudaMemsetAsync(gtable.raw_data(), 0, gtable.nbytes(), nullptr));  // rows never picked
  if (n == 0 || d == 0) return;
  MT_CHECK(n <= INT_MAX && rows <= (int64_t{1} << 62) / n, "embedding backward: ", n,
           " indices into ", rows, " rows is too many for one sort; split the lookup");
  const Device dev = gtable.device();
  Tensor keys_in = Tensor::empty({n}, DType::Int64, dev), keys_out = Tensor::empty({n}, DType::Int64, dev);
  auto* kin = static_cast<unsigned long long*>(keys_in.raw_data());
  auto* kout = static_cast<unsigned long long*>(keys_out.raw_data());
  launch(make_keys, blocks_for(n), indices.data<int64_t>(), kin, n);
  // Only the bits a key can use are sorted: keys are below rows * n.
  const int end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(rows * n - 1))));
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, kin, kout, static_cast<int>(n), 0, end_bit,
                                               cudaStream_t{nullptr}));
  Tensor temp = Tensor::empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, DType::UInt8, dev);
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.raw_data(), temp_bytes, kin, kout, static_cast<int>(n), 0,
                                               end_bit, cudaStream_t{nullptr}));
  Tensor row = Tensor::empty({n}, DType::Int64, dev), pos = Tensor::empty({n}, DType::Int64, dev);
  launch(split_keys, blocks_for(n), kout, row.data<int64_t>(), pos.data<int64_t>(), n);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 16));
  launch(run_sums, blocks, row.data<int64_t>(), pos.data<int64_t>(), gout.data<float>(),
         gtable.data<float>(), n, d);
}

}  // namespace mt::core::cuda
