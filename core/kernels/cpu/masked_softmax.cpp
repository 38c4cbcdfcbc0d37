#include "core/kernels/cpu/masked_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mt::core::cpu {

namespace {
constexpr int64_t kParallelElems = 1 << 15;
}  // namespace

void masked_softmax_forward(const Tensor& scores, const Tensor& key_mask, float scale, Tensor& y) {
  const int64_t sk = scores.shape()[3];
  const int64_t rows = sk > 0 ? scores.numel() / sk : 0;
  const int64_t rows_per_batch = scores.shape()[1] * scores.shape()[2];  // H * Sq
  const float* px = scores.data<float>();
  const float* pmask = key_mask.defined() ? key_mask.data<float>() : nullptr;
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (scores.numel() > kParallelElems)
  for (int64_t i = 0; i < rows; ++i) {
    const float* in = px + i * sk;
    const float* m = pmask ? pmask + (i / rows_per_batch) * sk : nullptr;
    float* out = py + i * sk;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < sk; ++k)
      if (!m || m[k] != 0.0f) mx = std::max(mx, in[k] * scale);
    if (mx == -std::numeric_limits<float>::infinity()) {  // nothing to attend to
      std::fill(out, out + sk, 0.0f);
      continue;
    }
    double sum = 0.0;
    for (int64_t k = 0; k < sk; ++k) {
      const float e = (!m || m[k] != 0.0f) ? std::exp(in[k] * scale - mx) : 0.0f;
      out[k] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < sk; ++k) out[k] *= inv;
  }
}

void masked_softmax_backward(const Tensor& y, const Tensor& gy, float scale, Tensor& gx) {
  const int64_t sk = y.shape()[3];
  const int64_t rows = sk > 0 ? y.numel() / sk : 0;
  const float *py = y.data<float>(), *pg = gy.data<float>();
  float* po = gx.data<float>();
#pragma omp parallel for schedule(static) if (y.numel() > kParallelElems)
  for (int64_t i = 0; i < rows; ++i) {
    const float *yl = py + i * sk, *gl = pg + i * sk;
    float* out = po + i * sk;
    double dot = 0.0;
    for (int64_t k = 0; k < sk; ++k) dot += static_cast<double>(gl[k]) * yl[k];
    const float d = static_cast<float>(dot);
    for (int64_t k = 0; k < sk; ++k) out[k] = scale * yl[k] * (gl[k] - d);
  }
}

}  // namespace mt::core::cpu
