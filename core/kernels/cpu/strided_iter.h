// Walks the elements of a tensor in logical (row-major) order, yielding element offsets for
// one or more tensors of the same shape but different strides. The innermost dimension is a
// plain loop; the outer index is decoded once per row, so the cost per element stays low.
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace mt::core::cpu {

template <size_t N, typename Fn>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, Fn&& fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    std::array<int64_t, N> off{};
    std::array<int64_t, N> inner{};
    fn(off, inner, int64_t{1});
    return;
  }
  const int64_t inner_len = shape[nd - 1];
  std::array<int64_t, N> inner_stride{};
  for (size_t k = 0; k < N; ++k) inner_stride[k] = (*strides[k])[nd - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d < nd - 1; ++d) rows *= shape[d];
  if (inner_len == 0) return;
#pragma omp parallel for schedule(static) if (rows * inner_len > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    std::array<int64_t, N> off{};
    int64_t rem = r;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx * (*strides[k])[d];
    }
    fn(off, inner_stride, inner_len);
  }
}

}  // namespace mt::core::cpu
