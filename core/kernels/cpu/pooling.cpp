#include "core/kernels/cpu/pooling.h"

#include <algorithm>
#include <cstring>

#include "core/memory_format.h"

namespace mt::core::cpu {

namespace {

// Below this many input elements the work is too small to share between threads.
constexpr int64_t kParallelElems = 1 << 15;

struct PoolGeometry {
  int64_t planes;  // N * C
  int64_t h, w, ho, wo;
  int64_t kernel, stride, pad;
};

PoolGeometry geometry(const Tensor& in, const Tensor& out, int64_t kernel, int64_t stride, int64_t pad) {
  return {in.shape()[0] * in.shape()[1], in.shape()[2], in.shape()[3], out.shape()[2],
          out.shape()[3], kernel, stride, pad};
}

// The window of output position `o` along one axis, clipped to the image: [lo, hi).
inline void window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size,
                   int64_t& lo, int64_t& hi) {
  const int64_t start = o * stride - pad;
  lo = std::max<int64_t>(start, 0);
  hi = std::min<int64_t>(start + kernel, size);
}

// Branch-free choice between a and b. Which tap of a window holds the maximum is
// data-dependent, so a branch per tap mispredicts about every other time; GCC turns
// `c ? a : b` into exactly such a branch here, while these mask operations always compile to
// straight-line code (measured 1.4x faster on LeNet's pooling).
inline int64_t select(bool c, int64_t a, int64_t b) {
  const int64_t m = -static_cast<int64_t>(c);
  return (a & m) | (b & ~m);
}
inline float select(bool c, float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  const uint32_t m = -static_cast<uint32_t>(c);
  const uint32_t r = (ua & m) | (ub & ~m);
  float f;
  std::memcpy(&f, &r, 4);
  return f;
}

// Whether v should replace the current maximum m. A NaN wins and then stays (nothing compares
// greater than it), so it propagates as in PyTorch instead of being silently skipped.
inline bool beats(float v, float m) { return (v > m) | (v != v); }

// The 2x2, stride 2, unpadded case (LeNet, VGG, most CNNs): no window clipping, and the four
// taps are compared pairwise, which halves the dependency chain of a sequential scan.
void max_pool_2x2(const float* in, int64_t W, int64_t HO, int64_t WO, float* out, int64_t* idx) {
  for (int64_t oh = 0; oh < HO; ++oh) {
    const float* r0 = in + 2 * oh * W;
    const float* r1 = r0 + W;
    for (int64_t ow = 0; ow < WO; ++ow) {
      const int64_t i = 2 * oh * W + 2 * ow;  // top-left tap
      const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
      const bool tb = beats(b, a), td = beats(d, c);
      const float top = select(tb, b, a), bottom = select(td, d, c);
      const int64_t itop = select(tb, i + 1, i), ibottom = select(td, i + W + 1, i + W);
      const bool tbot = beats(bottom, top);
      out[oh * WO + ow] = select(tbot, bottom, top);
      idx[oh * WO + ow] = select(tbot, ibottom, itop);
    }
  }
}

// Channels-last: a window's taps are rows of C values, compared a row at a time across the
// channels, in the same tap order as the planes' scan (so ties pick the same pixel). An index
// is the pixel's position in its H*W plane, as in NCHW, stored in y's channels-last order.
void max_pool_rows(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor& y,
                   Tensor& indices) {
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t HO = y.shape()[2], WO = y.shape()[3];
  const float* px = x.data<float>();
  float* py = y.data<float>();
  int64_t* pi = indices.data<int64_t>();
#pragma omp parallel for collapse(2) schedule(static) if (x.numel() > kParallelElems)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < HO; ++oh) {
      int64_t h0, h1;
      window(oh, stride, padding, kernel, H, h0, h1);
      for (int64_t ow = 0; ow < WO; ++ow) {
        int64_t w0, w1;
        window(ow, stride, padding, kernel, W, w0, w1);
        float* out = py + ((n * HO + oh) * WO + ow) * C;
        int64_t* idx = pi + ((n * HO + oh) * WO + ow) * C;
        const float* first = px + ((n * H + h0) * W + w0) * C;
        for (int64_t c = 0; c < C; ++c) {
          out[c] = first[c];
          idx[c] = h0 * W + w0;
        }
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            if (ih == h0 && iw == w0) continue;
            const float* in = px + ((n * H + ih) * W + iw) * C;
            const int64_t i = ih * W + iw;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const bool take = beats(in[c], out[c]);
              out[c] = select(take, in[c], out[c]);
              idx[c] = select(take, i, idx[c]);
            }
          }
      }
    }
}

}  // namespace

void max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                        Tensor& y, Tensor& indices) {
  if (is_channels_last(x)) return max_pool_rows(x, kernel, stride, padding, y, indices);
  // Locals, not struct fields: the int64 index stores below could alias a struct's int64
  // members, which would force the compiler to reload the geometry in the inner loop.
  const PoolGeometry g = geometry(x, y, kernel, stride, padding);
  const int64_t H = g.h, W = g.w, HO = g.ho, WO = g.wo;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  int64_t* pi = indices.data<int64_t>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = px + p * H * W;
    float* out = py + p * HO * WO;
    int64_t* idx = pi + p * HO * WO;
    if (kernel == 2 && stride == 2 && padding == 0) {
      max_pool_2x2(in, W, HO, WO, out, idx);
      continue;
    }
    for (int64_t oh = 0; oh < HO; ++oh) {
      int64_t h0, h1;
      window(oh, stride, padding, kernel, H, h0, h1);
      for (int64_t ow = 0; ow < WO; ++ow) {
        int64_t w0, w1;
        window(ow, stride, padding, kernel, W, w0, w1);
        // The op guarantees padding <= kernel / 2, so every window holds an image pixel.
        int64_t best_i = h0 * W + w0;
        float best = in[best_i];
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const int64_t i = ih * W + iw;
            const float v = in[i];
            const bool take = beats(v, best);
            best = select(take, v, best);
            best_i = select(take, i, best_i);
          }
        out[oh * WO + ow] = best;
        idx[oh * WO + ow] = best_i;
      }
    }
  }
}

void max_pool2d_backward(const Tensor& gy, const Tensor& indices, Tensor& gx) {
  const int64_t planes = gx.shape()[0] * gx.shape()[1];
  const int64_t in_plane = gx.shape()[2] * gx.shape()[3];
  const int64_t out_plane = gy.shape()[2] * gy.shape()[3];
  const float* pg = gy.data<float>();
  const int64_t* pi = indices.data<int64_t>();
  float* px = gx.data<float>();
  if (is_channels_last(gx)) {  // gy and indices in the same order; a sample's rows at a time
    const int64_t N = gx.shape()[0], C = gx.shape()[1];
#pragma omp parallel for schedule(static) if (gx.numel() > kParallelElems)
    for (int64_t n = 0; n < N; ++n) {
      float* dst = px + n * in_plane * C;
      std::fill(dst, dst + in_plane * C, 0.0f);
      const float* g = pg + n * out_plane * C;
      const int64_t* idx = pi + n * out_plane * C;
      for (int64_t i = 0; i < out_plane; ++i)
        for (int64_t c = 0; c < C; ++c) dst[idx[i * C + c] * C + c] += g[i * C + c];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (gx.numel() > kParallelElems)
  for (int64_t p = 0; p < planes; ++p) {
    float* dst = px + p * in_plane;
    std::fill(dst, dst + in_plane, 0.0f);
    const float* g = pg + p * out_plane;
    const int64_t* idx = pi + p * out_plane;
    // Overlapping windows (stride < kernel) can pick the same pixel: accumulate.
    for (int64_t i = 0; i < out_plane; ++i) dst[idx[i]] += g[i];
  }
}

void avg_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor& y) {
  const PoolGeometry g = geometry(x, y, kernel, stride, padding);
  const float* px = x.data<float>();
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = px + p * g.h * g.w;
    float* out = py + p * g.ho * g.wo;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      int64_t h0, h1;
      window(oh, g.stride, g.pad, g.kernel, g.h, h0, h1);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        int64_t w0, w1;
        window(ow, g.stride, g.pad, g.kernel, g.w, w0, w1);
        float s = 0.0f;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) s += in[ih * g.w + iw];
        out[oh * g.wo + ow] = s / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
  }
}

void avg_pool2d_backward(const Tensor& gy, int64_t kernel, int64_t stride, int64_t padding, Tensor& gx) {
  const PoolGeometry g = geometry(gx, gy, kernel, stride, padding);
  const float* pg = gy.data<float>();
  float* px = gx.data<float>();
#pragma omp parallel for schedule(static) if (gx.numel() > kParallelElems)
  for (int64_t p = 0; p < g.planes; ++p) {
    float* dst = px + p * g.h * g.w;
    std::fill(dst, dst + g.h * g.w, 0.0f);
    const float* grad = pg + p * g.ho * g.wo;
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      int64_t h0, h1;
      window(oh, g.stride, g.pad, g.kernel, g.h, h0, h1);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        int64_t w0, w1;
        window(ow, g.stride, g.pad, g.kernel, g.w, w0, w1);
        const float share = grad[oh * g.wo + ow] / static_cast<float>((h1 - h0) * (w1 - w0));
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) dst[ih * g.w + iw] += share;
      }
    }
  }
}

void global_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  const int64_t planes = x.shape()[0] * x.shape()[1], hw = x.shape()[2] * x.shape()[3];
  const float* px = x.data<float>();
  float* py = y.data<float>();
  if (is_channels_last(x)) {  // sample n is hw rows of C: sum the rows
    const int64_t c = x.shape()[1];
#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
    for (int64_t n = 0; n < x.shape()[0]; ++n) {
      float* out = py + n * c;
      std::fill(out, out + c, 0.0f);
      for (int64_t i = 0; i < hw; ++i) {
        const float* row = px + (n * hw + i) * c;
#pragma omp simd
        for (int64_t ch = 0; ch < c; ++ch) out[ch] += row[ch];
      }
      for (int64_t ch = 0; ch < c; ++ch) out[ch] /= static_cast<float>(hw);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t p = 0; p < planes; ++p) {
    const float* in = px + p * hw;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < hw; ++i) s += in[i];
    py[p] = s / static_cast<float>(hw);
  }
}

void global_avg_pool2d_backward(const Tensor& gy, Tensor& gx) {
  const int64_t planes = gx.shape()[0] * gx.shape()[1], hw = gx.shape()[2] * gx.shape()[3];
  const float* pg = gy.data<float>();
  float* px = gx.data<float>();
  if (is_channels_last(gx)) {
    const int64_t c = gx.shape()[1];
#pragma omp parallel for schedule(static) if (gx.numel() > kParallelElems)
    for (int64_t n = 0; n < gx.shape()[0]; ++n) {
      const float* g = pg + n * c;
      for (int64_t i = 0; i < hw; ++i) {
        float* row = px + (n * hw + i) * c;
#pragma omp simd
        for (int64_t ch = 0; ch < c; ++ch) row[ch] = g[ch] / static_cast<float>(hw);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static) if (gx.numel() > kParallelElems)
  for (int64_t p = 0; p < planes; ++p) std::fill(px + p * hw, px + (p + 1) * hw, pg[p] / static_cast<float>(hw));
}

}  // namespace mt::core::cpu
