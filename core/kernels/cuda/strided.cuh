// Element offsets of strided tensors on the device: a linear index in the logical (row-major)
// order of a shape is decoded into one element offset per operand. Used by the copy, fill and
// broadcasting kernels for operands that are not plain contiguous arrays.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace mt::core::cuda {

constexpr int kMaxDims = 8;

// N operands sharing one shape, each with its own strides (0 along broadcast dimensions).
// Passed to kernels by value.
template <int N>
struct StridedIndexer {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  __device__ void offsets(int64_t linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

template <int N>
StridedIndexer<N> make_indexer(const Shape& shape, const Shape* const (&strides)[N]) {
  MT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "CUDA kernels support tensors of up to ",
           kMaxDims, " dimensions, got ", shape_str(shape));
  StridedIndexer<N> ix;
  ix.nd = static_cast<int>(shape.size());
  for (int d = 0; d < ix.nd; ++d) {
    ix.sizes[d] = shape[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = (*strides[k])[d];
  }
  return ix;
}

}  // namespace mt::core::cuda
