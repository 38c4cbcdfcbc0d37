#include "core/kernels/cpu/masked_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cpu/vector_math.h"

namespace mt::core::cpu {

namespace {
constexpr int64_t kParallelElems = 1 << 15;

// One row: out = softmax(scale * in) over the keys whose mask is non-zero (every key when
// kMasked is false), 0 elsewhere. The mask is a select, not a branch, and the two cases are
// separate loops, so that the compiler vectorizes both; inlined, so that it gets the caller's
// vector width (MT_VECTOR_CLONES).
template <bool kMasked>
[[gnu::always_inline]] inline void softmax_row(const float* in, const float* m, int64_t sk, float scale,
                                               float* out) {
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float mx = kNone;
#pragma omp simd reduction(max : mx)
  for (int64_t k = 0; k < sk; ++k) {
    const float v = in[k] * scale;
    mx = std::max(mx, !kMasked || m[k] != 0.0f ? v : kNone);
  }
  if (mx == kNone) {  // nothing to attend to
    std::fill(out, out + sk, 0.0f);
    return;
  }
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t k = 0; k < sk; ++k) {
    const float e = std::exp(in[k] * scale - mx);
    out[k] = !kMasked || m[k] != 0.0f ? e : 0.0f;
    sum += out[k];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < sk; ++k) out[k] *= inv;
}

}  // namespace

MT_VECTOR_CLONES void masked_softmax_forward(const Tensor& scores, const Tensor& key_mask, float scale, Tensor& y) {
  const int64_t sk = scores.shape()[3];
  const int64_t rows = sk > 0 ? scores.numel() / sk : 0;
  const int64_t rows_per_batch = scores.shape()[1] * scores.shape()[2];  // H * Sq
  const float* px = scores.data<float>();
  const float* pmask = key_mask.defined() ? key_mask.data<float>() : nullptr;
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (scores.numel() > kParallelElems)
  for (int64_t i = 0; i < rows; ++i) {
    if (pmask) {
      softmax_row<true>(px + i * sk, pmask + (i / rows_per_batch) * sk, sk, scale, py + i * sk);
    } else {
      softmax_row<false>(px + i * sk, nullptr, sk, scale, py + i * sk);
    }
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
#pragma omp simd reduction(+ : dot)
    for (int64_t k = 0; k < sk; ++k) dot += static_cast<double>(gl[k]) * yl[k];
    const float d = static_cast<float>(dot);
    for (int64_t k = 0; k < sk; ++k) out[k] = scale * yl[k] * (gl[k] - d);
  }
}

}  // namespace mt::core::cpu
