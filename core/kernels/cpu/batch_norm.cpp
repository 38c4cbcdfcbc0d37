#include "core/kernels/cpu/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/relu_rule.h"
#include "core/memory_format.h"

namespace mt::core::cpu {

namespace {

// Two layouts. Planes (NCHW): channel ch's elements are n runs of H*W, so each channel is one
// task. Rows (channels-last images, and [N, C] features): an [m, C] matrix whose rows hold one
// value of every channel, so the loops run along rows and vectorize across the channels.
bool channels_innermost(const Tensor& x) { return x.dim() == 2 || is_channels_last(x); }

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

// bn(x) = x * scale + shift: the normalization and the affine parameters folded into one
// multiply-add per element. Backward recomputes it from the same floats (save_mean and
// save_invstd are the forward's), so a fused ReLU's mask there is the forward's exactly.
struct Affine {
  float scale, shift;
};
Affine affine_of(const float* weight, const float* bias, int64_t ch, float mean, float invstd) {
  const float scale = (weight ? weight[ch] : 1.0f) * invstd;
  return {scale, (bias ? bias[ch] : 0.0f) - mean * scale};
}
// affine_of for every channel, as vectors for the rows' loops.
void affine_per_channel(const float* weight, const float* bias, const float* mean, const float* invstd,
                        int64_t c, std::vector<float>& scale, std::vector<float>& shift) {
  scale.resize(c);
  shift.resize(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    const Affine f = affine_of(weight, bias, ch, mean[ch], invstd[ch]);
    scale[ch] = f.scale;
    shift[ch] = f.shift;
  }
}

// The fused ReLU: forward clamps bn(x) at 0, and backward lets the gradient through only where
// that output was > 0 (relu_gate on bn(x) itself: the clamp keeps exactly its positive values).
template <bool kRelu>
float activate(float v) {
  return kRelu ? relu_value(v) : v;
}
template <bool kRelu>
float gate(float g, float bn_value) {
  return kRelu ? relu_gate(g, bn_value) : g;
}

template <bool kRelu>
MT_VECTOR_CLONES void forward_planes(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     Tensor& running_mean, Tensor& running_var, bool training,
                                     float momentum, float eps, Tensor& y, Tensor& save_mean,
                                     Tensor& save_invstd) {
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
      // The unbiased variance (the op ensures count > 1).
      if (prv) prv[ch] = static_cast<float>((1.0 - momentum) * prv[ch] + momentum * (sq / (count - 1.0)));
    } else {
      mean = prm[ch];
      var = prv[ch];
    }
    const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    pmean[ch] = static_cast<float>(mean);
    pinv[ch] = invstd;
    const Affine f = affine_of(pw, pb, ch, pmean[ch], invstd);
    for (int64_t i = 0; i < L.n; ++i) {
      const float* row = px + (i * L.c + ch) * L.s;
      float* out = py + (i * L.c + ch) * L.s;
#pragma omp simd
      for (int64_t j = 0; j < L.s; ++j) out[j] = activate<kRelu>(row[j] * f.scale + f.shift);
    }
  }
}

template <bool kRelu>
MT_VECTOR_CLONES void backward_planes(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                      const Tensor& save_mean, const Tensor& save_invstd,
                                      const Tensor& gy, bool training, Tensor& gx, Tensor& gw,
                                      Tensor& gb) {
  const Layout L = layout(x);
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pbias = bias.defined() ? bias.data<float>() : nullptr;
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
    const Affine f = affine_of(pw, pbias, ch, mean, invstd);
    // sum(gy) and sum(gy * xhat), with xhat = (x - mean) * invstd recomputed, not stored
    // (gy gated by the fused ReLU's mask, from bn(x) recomputed the same way).
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t i = 0; i < L.n; ++i) {
      const float* row = px + (i * L.c + ch) * L.s;
      const float* g = pg + (i * L.c + ch) * L.s;
      float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
      for (int64_t j = 0; j < L.s; ++j) {
        const float gj = gate<kRelu>(g[j], row[j] * f.scale + f.shift);
        a += gj;
        b += gj * (row[j] - mean);
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
      for (int64_t j = 0; j < L.s; ++j) {
        const float gj = gate<kRelu>(g[j], row[j] * f.scale + f.shift);
        out[j] = k * (gj - mg - (row[j] - mean) * invstd * mgx);
      }
    }
  }
}

// Column sums over the m rows of an [m, c] layout, in double, one vector of c per term:
// terms(i, ch) give row i's values for channel ch. Rows go in blocks of about 64 KiB (in the L2
// cache), each summed in float 16 channels at a time, so that the running sums stay in vector
// registers while the block's rows stream by; the blocks' sums are added in block order, so the
// result does not depend on the number of threads. out[k * c + ch] is term k's sum.
template <typename... Terms>
MT_VECTOR_CLONES void column_sums(int64_t m, int64_t c, std::vector<double>& out, Terms... terms) {
  constexpr int64_t K = sizeof...(Terms), kLanes = 16, kBlockElems = 1 << 14;
  const int64_t rows_per_block = std::max<int64_t>(4, kBlockElems / c);
  const int64_t blocks = (m + rows_per_block - 1) / rows_per_block;
  std::vector<double> partial(static_cast<size_t>(blocks * K * c));
#pragma omp parallel for schedule(static) if (m * c > kParallelElems)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * rows_per_block, hi = std::min(m, lo + rows_per_block);
    double* p = partial.data() + b * K * c;
    for (int64_t c0 = 0; c0 < c; c0 += kLanes) {
      const int64_t width = std::min(kLanes, c - c0);
      float acc[K][kLanes] = {};
      auto add = [&]<size_t... k>(std::index_sequence<k...>, int64_t i, int64_t j) {
        ((acc[k][j] += terms(i, c0 + j)), ...);
      };
      if (width == kLanes) {
        for (int64_t i = lo; i < hi; ++i) {
#pragma omp simd
          for (int64_t j = 0; j < kLanes; ++j) add(std::make_index_sequence<K>(), i, j);
        }
      } else {
        for (int64_t i = lo; i < hi; ++i)
          for (int64_t j = 0; j < width; ++j) add(std::make_index_sequence<K>(), i, j);
      }
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < width; ++j) p[k * c + c0 + j] = acc[k][j];
    }
  }
  out.assign(static_cast<size_t>(K * c), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < K * c; ++j) out[j] += partial[b * K * c + j];
}

// forward_planes over rows, with one difference: both moments come from one pass over x (below).
template <bool kRelu>
MT_VECTOR_CLONES void forward_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   Tensor& running_mean, Tensor& running_var, bool training,
                                   float momentum, float eps, Tensor& y, Tensor& save_mean,
                                   Tensor& save_invstd) {
  const int64_t c = x.shape()[1], m = x.numel() / c;
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* prm = running_mean.defined() ? running_mean.data<float>() : nullptr;
  float* prv = running_var.defined() ? running_var.data<float>() : nullptr;
  float* pmean = save_mean.data<float>();
  float* pinv = save_invstd.data<float>();
  const double count = static_cast<double>(m);

  std::vector<float> scale, shift;
  std::vector<double> mean(c), var(c);
  if (training) {
    // One pass for both moments, of x shifted by the channel's first value: var = E[d^2] -
    // E[d]^2 with d = x - x0 cancels only as much as the mean lies away from x0, which one
    // sample of the channel keeps within its spread (the planes' two passes read x twice).
    const float* shift0 = px;
    std::vector<double> sums;
    column_sums(
        m, c, sums, [&](int64_t i, int64_t ch) { return px[i * c + ch] - shift0[ch]; },
        [&](int64_t i, int64_t ch) { return (px[i * c + ch] - shift0[ch]) * (px[i * c + ch] - shift0[ch]); });
    for (int64_t ch = 0; ch < c; ++ch) {
      const double md = sums[ch] / count;
      const double sq = std::max(0.0, sums[c + ch] - sums[ch] * md);  // sum of squared deviations
      mean[ch] = shift0[ch] + md;
      var[ch] = sq / count;
      if (prm) prm[ch] = static_cast<float>((1.0 - momentum) * prm[ch] + momentum * mean[ch]);
      if (prv) prv[ch] = static_cast<float>((1.0 - momentum) * prv[ch] + momentum * sq / (count - 1.0));
    }
  } else {
    mean.assign(prm, prm + c);
    var.assign(prv, prv + c);
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    pmean[ch] = static_cast<float>(mean[ch]);
    pinv[ch] = static_cast<float>(1.0 / std::sqrt(var[ch] + eps));
  }
  affine_per_channel(pw, pb, pmean, pinv, c, scale, shift);
  float* py = y.data<float>();
  const float* ps = scale.data();
  const float* pt = shift.data();
#pragma omp parallel for schedule(static) if (m * c > kParallelElems)
  for (int64_t i = 0; i < m; ++i) {
    const float* row = px + i * c;
    float* out = py + i * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) out[ch] = activate<kRelu>(row[ch] * ps[ch] + pt[ch]);
  }
}

template <bool kRelu>
MT_VECTOR_CLONES void backward_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& save_mean, const Tensor& save_invstd,
                                    const Tensor& gy, bool training, Tensor& gx, Tensor& gw,
                                    Tensor& gb) {
  const int64_t c = x.shape()[1], m = x.numel() / c;
  const float* px = x.data<float>();
  const float* pw = weight.defined() ? weight.data<float>() : nullptr;
  const float* pbias = bias.defined() ? bias.data<float>() : nullptr;
  const float* pmean = save_mean.data<float>();
  const float* pinv = save_invstd.data<float>();
  const float* pg = gy.data<float>();
  const double count = static_cast<double>(m);

  // The fused ReLU's gate needs bn(x) per element: the forward's scale and shift per channel.
  std::vector<float> scale, shift;
  if (kRelu) affine_per_channel(pw, pbias, pmean, pinv, c, scale, shift);
  const float* ps = scale.data();
  const float* pt = shift.data();
  auto grad = [&](int64_t i, int64_t ch) {
    return gate<kRelu>(pg[i * c + ch], kRelu ? px[i * c + ch] * ps[ch] + pt[ch] : 0.0f);
  };

  // sum(gy) in [0, c), sum(gy * (x - mean)) in [c, 2c).
  std::vector<double> sums;
  column_sums(
      m, c, sums, grad, [&](int64_t i, int64_t ch) { return grad(i, ch) * (px[i * c + ch] - pmean[ch]); });
  // gx = k * (gy - mean(gy) - xhat * mean(gy * xhat)) regrouped per channel as
  // a * gy + b * x + d, so that a row costs three multiply-adds a value.
  std::vector<float> a(c), b(c), d(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    const double sum_g = sums[ch], sum_gx = sums[c + ch] * pinv[ch];
    if (gw.defined()) gw.data<float>()[ch] = static_cast<float>(sum_gx);
    if (gb.defined()) gb.data<float>()[ch] = static_cast<float>(sum_g);
    const double k = static_cast<double>(pw ? pw[ch] : 1.0f) * pinv[ch];
    const double mg = training ? sum_g / count : 0.0, mgx = training ? sum_gx / count : 0.0;
    a[ch] = static_cast<float>(k);
    b[ch] = static_cast<float>(-k * pinv[ch] * mgx);
    d[ch] = static_cast<float>(k * (pmean[ch] * pinv[ch] * mgx - mg));
  }
  if (!gx.defined()) return;
  float* po = gx.data<float>();
  const float *pa = a.data(), *pb = b.data(), *pd = d.data();
#pragma omp parallel for schedule(static) if (m * c > kParallelElems)
  for (int64_t i = 0; i < m; ++i) {
    const float* row = px + i * c;
    float* out = po + i * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) out[ch] = pa[ch] * grad(i, ch) + pb[ch] * row[ch] + pd[ch];
  }
}

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, bool relu, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  auto* kernel = channels_innermost(x) ? (relu ? forward_rows<true> : forward_rows<false>)
                                       : (relu ? forward_planes<true> : forward_planes<false>);
  kernel(x, weight, bias, running_mean, running_var, training, momentum, eps, y, save_mean, save_invstd);
}

void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& save_mean, const Tensor& save_invstd, const Tensor& gy,
                         bool training, bool relu, Tensor& gx, Tensor& gw, Tensor& gb) {
  auto* kernel = channels_innermost(x) ? (relu ? backward_rows<true> : backward_rows<false>)
                                       : (relu ? backward_planes<true> : backward_planes<false>);
  kernel(x, weight, bias, save_mean, save_invstd, gy, training, gx, gw, gb);
}

}  // namespace mt::core::cpu
