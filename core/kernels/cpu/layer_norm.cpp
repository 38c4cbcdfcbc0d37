#include "core/kernels/cpu/layer_norm.h"

#include <algorithm>
#include <cmath>

namespace mt::core::cpu {

namespace {
constexpr int64_t kParallelElems = 1 << 14;
// Columns per task of the weight/bias gradient: wide enough for vector loads along a row,
// narrow enough that a D = 768 layer still splits into a dozen tasks.
constexpr int64_t kColumnTile = 64;
}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t d = x.shape()[x.dim() - 1], n = d > 0 ? x.numel() / d : 0;
  const float *px = x.data<float>(), *pw = weight.data<float>(), *pb = bias.data<float>();
  float *py = y.data<float>(), *pm = mean.data<float>(), *pr = rstd.data<float>();
#pragma omp parallel for schedule(static) if (n * d > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = px + i * d;
    // Two passes in double: the one-pass E[x^2] - E[x]^2 cancels catastrophically when the
    // mean is large against the spread, which activations after a residual add often are.
    double s = 0.0;
    for (int64_t j = 0; j < d; ++j) s += row[j];
    const double mu = s / static_cast<double>(d);
    double v = 0.0;
    for (int64_t j = 0; j < d; ++j) {
      const double c = row[j] - mu;
      v += c * c;
    }
    const float m = static_cast<float>(mu);
    const float r = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(d) + eps));
    pm[i] = m;
    pr[i] = r;
    float* out = py + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = (row[j] - m) * r * pw[j] + pb[j];
  }
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& gy, Tensor& gx, Tensor& gweight, Tensor& gbias) {
  const int64_t d = x.shape()[x.dim() - 1], n = d > 0 ? x.numel() / d : 0;
  const float *px = x.data<float>(), *pw = weight.data<float>(), *pg = gy.data<float>();
  const float *pm = mean.data<float>(), *pr = rstd.data<float>();
  if (gx.defined()) {
    float* po = gx.data<float>();
#pragma omp parallel for schedule(static) if (n * d > kParallelElems)
    for (int64_t i = 0; i < n; ++i) {
      const float *row = px + i * d, *g = pg + i * d;
      const float m = pm[i], r = pr[i];
      double a = 0.0, c = 0.0;  // sum(gxhat), sum(gxhat * xhat)
      for (int64_t j = 0; j < d; ++j) {
        const double gh = static_cast<double>(g[j]) * pw[j];
        a += gh;
        c += gh * ((row[j] - m) * r);
      }
      const float mean_g = static_cast<float>(a / static_cast<double>(d));
      const float mean_gx = static_cast<float>(c / static_cast<double>(d));
      float* out = po + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const float xhat = (row[j] - m) * r;
        out[j] = r * (g[j] * pw[j] - mean_g - xhat * mean_gx);
      }
    }
  }
  if (!gweight.defined() && !gbias.defined()) return;
  // Column sums over the rows: each task owns a tile of columns and walks all rows in order,
  // so the sums are deterministic (no reduction across threads) and rows are read along.
  float* pgw = gweight.defined() ? gweight.data<float>() : nullptr;
  float* pgb = gbias.defined() ? gbias.data<float>() : nullptr;
  const int64_t tiles = (d + kColumnTile - 1) / kColumnTile;
#pragma omp parallel for schedule(static) if (n * d > kParallelElems)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t c0 = t * kColumnTile, c1 = std::min(d, c0 + kColumnTile);
    double sw[kColumnTile] = {}, sb[kColumnTile] = {};
    for (int64_t i = 0; i < n; ++i) {
      const float *row = px + i * d, *g = pg + i * d;
      const float m = pm[i], r = pr[i];
      for (int64_t j = c0; j < c1; ++j) {
        sw[j - c0] += static_cast<double>(g[j]) * ((row[j] - m) * r);
        sb[j - c0] += g[j];
      }
    }
    for (int64_t j = c0; j < c1; ++j) {
      if (pgw) pgw[j] = static_cast<float>(sw[j - c0]);
      if (pgb) pgb[j] = static_cast<float>(sb[j - c0]);
    }
  }
}

}  // namespace mt::core::cpu
