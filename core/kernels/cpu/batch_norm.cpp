#include "core/kernels/cpu/batch_norm.h"

#include <cmath>

namespace mt::core::cpu {

namespace {

// x viewed as [n, c, s]: s = H*W for images, 1 for [N, C] features. Channel ch's elements are
// the n runs x[(i*c + ch)*s .. +s).
struct Layout {
  int64_t n, c, s;
  int64_t count() const { return n * s; }  // elements per channel
};

Layout layout(const Tensor& x) {
  const int64_t s = x.dim() == 4 ? x.shape()[2] * x.shape()[3] : 1;
  return {x.shape()[0], x.shape()[1], s};
}

// Channels are independent; with few of them the parallel loop is still cheap.
constexpr int64_t kParallelElems = 1 << 14;

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  const Layout L = layout(x);
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* prm = running_mean.defined() ? running_mean.data<float>() : nullptr;
  float* prv = running_var.defined() ? running_var.data<float>() : nullptr;
  float* py = y.data<float>();
  float* pmean = save_mean.data<float>();
  float* pinv = save_invstd.data<float>();
  const double count = static_cast<double>(L.count());

#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t ch = 0; ch < L.c; ++ch) {
    double mean, var;
    if (training) {
      // Two passes (mean, then squared deviations): one-pass E[x^2] - E[x]^2 cancels badly
      // when the mean is large. Runs sum in float (vectorized), rows in double.
      double sum = 0.0;
      for (int64_t i = 0; i < L.n; ++i) {
        const float* row = px + (i * L.c + ch) * L.s;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < L.s; ++j) s += row[j];
        sum += s;
      }
      mean = sum / count;
      const float m = static_cast<float>(mean);
      double sq = 0.0;
      for (int64_t i = 0; i < L.n; ++i) {
        const float* row = px + (i * L.c + ch) * L.s;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < L.s; ++j) s += (row[j] - m) * (row[j] - m);
        sq += s;
      }
      var = sq / count;  // biased: what normalization uses
      if (prm) prm[ch] = static_cast<float>((1.0 - momentum) * prm[ch] + momentum * mean);
      if (prv) {
        const double unbiased = sq / (count - 1.0);  // the op ensures count > 1
        prv[ch] = static_cast<float>((1.0 - momentum) * prv[ch] + momentum * unbiased);
      }
    } else {
      mean = prm[ch];
      var = prv[ch];
    }
    const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    pmean[ch] = static_cast<float>(mean);
    pinv[ch] = invstd;
    // y = (x - mean) * invstd * w + b folded into one multiply-add per element.
    const float scale = (pw ? pw[ch] : 1.0f) * invstd;
    const float shift = (pb ? pb[ch] : 0.0f) - static_cast<float>(mean) * scale;
    for (int64_t i = 0; i < L.n; ++i) {
      const float* row = px + (i * L.c + ch) * L.s;
      float* out = py + (i * L.c + ch) * L.s;
#pragma omp simd
      for (int64_t j = 0; j < L.s; ++j) out[j] = row[j] * scale + shift;
    }
  }
}

void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, const Tensor& gy, bool training, Tensor& gx,
                         Tensor& gw, Tensor& gb) {
  const Layout L = layout(x);
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pmean = save_mean.data<float>();
  const float* pinv = save_invstd.data<float>();
  const float* pg = gy.data<float>();
  float* pgx = gx.defined() ? gx.data<float>() : nullptr;
  float* pgw = gw.defined() ? gw.data<float>() : nullptr;
  float* pgb = gb.defined() ? gb.data<float>() : nullptr;
  const double count = static_cast<double>(L.count());

#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t ch = 0; ch < L.c; ++ch) {
    const float mean = pmean[ch], invstd = pinv[ch];
    // sum(gy) and sum(gy * xhat), with xhat = (x - mean) * invstd recomputed, not stored.
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t i = 0; i < L.n; ++i) {
      const float* row = px + (i * L.c + ch) * L.s;
      const float* g = pg + (i * L.c + ch) * L.s;
      float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
      for (int64_t j = 0; j < L.s; ++j) {
        a += g[j];
        b += g[j] * (row[j] - mean);
      }
      sum_g += a;
      sum_gx += b;
    }
    sum_gx *= invstd;
    if (pgw) pgw[ch] = static_cast<float>(sum_gx);
    if (pgb) pgb[ch] = static_cast<float>(sum_g);
    if (!pgx) continue;
    const float k = (pw ? pw[ch] : 1.0f) * invstd;
    // Training: gx = k * (gy - mean(gy) - xhat * mean(gy * xhat)); evaluation: gx = k * gy.
    const float mg = training ? static_cast<float>(sum_g / count) : 0.0f;
    const float mgx = training ? static_cast<float>(sum_gx / count) : 0.0f;
    for (int64_t i = 0; i < L.n; ++i) {
      const float* row = px + (i * L.c + ch) * L.s;
      const float* g = pg + (i * L.c + ch) * L.s;
      float* out = pgx + (i * L.c + ch) * L.s;
#pragma omp simd
      for (int64_t j = 0; j < L.s; ++j) out[j] = k * (g[j] - mg - (row[j] - mean) * invstd * mgx);
    }
  }
}

}  // namespace mt::core::cpu
