#include "core/kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mt::core::cpu {

namespace {
constexpr int64_t kParallelElems = 1 << 15;
}  // namespace

void embedding_forward(const Tensor& table, const Tensor& indices, Tensor& out) {
  const int64_t n = indices.numel(), d = table.shape()[1];
  const float* pt = table.data<float>();
  const int64_t* idx = indices.data<int64_t>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (n * d > kParallelElems)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(po + i * d, pt + idx[i] * d, static_cast<size_t>(d) * sizeof(float));
}

void embedding_backward(const Tensor& gout, const Tensor& indices, Tensor& gtable) {
  const int64_t n = indices.numel(), rows = gtable.shape()[0], d = gtable.shape()[1];
  const int64_t* idx = indices.data<int64_t>();
  const float* pg = gout.data<float>();
  float* pt = gtable.data<float>();
  // A stable counting sort of the positions by table row (CSR: row r's positions are
  // order[start[r] .. start[r + 1]), increasing). Each table row then has one owner that adds
  // its contributions in a fixed order: no atomics, and the same bits for any thread count.
  std::vector<int64_t> start(rows + 1, 0), order(n);
  for (int64_t i = 0; i < n; ++i) ++start[idx[i] + 1];
  for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
  std::vector<int64_t> cursor(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[cursor[idx[i]]++] = i;
#pragma omp parallel for schedule(static) if (rows * d > kParallelElems)
  for (int64_t r = 0; r < rows; ++r) {
    float* out = pt + r * d;
    std::fill(out, out + d, 0.0f);
    for (int64_t j = start[r]; j < start[r + 1]; ++j) {
      const float* g = pg + order[j] * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) out[c] += g[c];
    }
  }
}

}  // namespace mt::core::cpu
