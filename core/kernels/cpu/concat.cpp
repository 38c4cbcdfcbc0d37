// Both directions view each tensor as [outer, size(dim) * inner]: for every outer index, input
// i owns one contiguous run of out's row, so the whole copy is a series of memcpys.
#include "core/kernels/cpu/concat.h"

#include <cstring>

namespace mt::core::cpu {

void cat_forward(const std::vector<Tensor>& xs, int64_t dim, Tensor& out) {
  const int64_t outer = outer_size(out.shape(), dim), inner = inner_size(out.shape(), dim);
  const int64_t out_row = out.shape()[dim] * inner;
  float* po = out.data<float>();
  int64_t start = 0;  // where input i's run begins within a row of out
  for (const Tensor& x : xs) {
    const int64_t run = x.shape()[dim] * inner;
    const float* px = x.data<float>();
#pragma omp parallel for schedule(static) if (outer * run > (1 << 16))
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(po + o * out_row + start, px + o * run, run * sizeof(float));
    start += run;
  }
}

void cat_backward(const Tensor& g, int64_t dim, const std::vector<int64_t>& sizes,
                  std::vector<Tensor>& gxs) {
  const int64_t outer = outer_size(g.shape(), dim), inner = inner_size(g.shape(), dim);
  const int64_t g_row = g.shape()[dim] * inner;
  const float* pg = g.data<float>();
  int64_t start = 0;
  for (size_t i = 0; i < gxs.size(); ++i) {
    const int64_t run = sizes[i] * inner;
    if (gxs[i].defined()) {
      float* px = gxs[i].data<float>();
#pragma omp parallel for schedule(static) if (outer * run > (1 << 16))
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(px + o * run, pg + o * g_row + start, run * sizeof(float));
    }
    start += run;
  }
}

}  // namespace mt::core::cpu
