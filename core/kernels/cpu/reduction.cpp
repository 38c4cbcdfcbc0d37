#include "core/kernels/cpu/reduction.h"

#include "core/kernels/cpu/elementwise.h"

namespace mt::core::cpu {

void sum_dims(const Tensor& x, const std::vector<bool>& reduce, Tensor& out) {
  // Reorder x as [kept..., reduced...] so that each output element sums one contiguous run.
  const int64_t nd = x.dim();
  Shape kept_shape, red_shape, perm_shape, perm_strides;
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
  const int64_t run = outer == 0 ? 0 : x.numel() / outer;
  const float* px = perm.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() > (1 << 16) && outer > 1)
  for (int64_t i = 0; i < outer; ++i) {
    const float* p = px + i * run;
    double acc = 0.0;  // double: long runs of float adds lose too much precision
    for (int64_t j = 0; j < run; ++j) acc += p[j];
    po[i] = static_cast<float>(acc);
  }
}

void argmax_dim(const Tensor& x, int64_t dim, Tensor& indices) {
  Tensor xc = x.contiguous();
  const float* p = xc.data<float>();
  int64_t* out = indices.data<int64_t>();
  const int64_t outer = outer_size(x.shape(), dim), inner = inner_size(x.shape(), dim), n = x.shape()[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* base = p + o * n * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k)
        if (base[k * inner] > base[best * inner]) best = k;
      out[o * inner + i] = best;
    }
}

}  // namespace mt::core::cpu
