// The reference convolution kernels, and the dispatch between them and oneDNN's (conv_dnnl.cpp,
// in builds that have it; at the end of this file).
//
// Convolution as matrix products. For one sample, im2col unfolds the input into
// col[C*kh*kw, Ho*Wo] (column j holds the receptive field of output pixel j), so that
//   y[O, Ho*Wo]      = W[O, C*kh*kw] * col
//   dW[O, C*kh*kw]  += dy[O, Ho*Wo] * col^T
//   dcol[C*kh*kw, Ho*Wo] = W^T * dy,  then col2im folds dcol back onto dx.
// Samples are independent, so the batch is split across OpenMP threads and each thread runs
// single-threaded GEMMs (cpu::gemm() falls back to gemm_serial inside a parallel region, and
// splits the product itself when a batch is too small to share); dW is summed per thread and
// the partial sums are reduced in thread order afterwards, so the result does not depend on
// scheduling. Padding is handled by unfolding from a zero-bordered copy of the sample, which
// keeps the copy loops free of bounds checks.
//
// Under a 16-bit compute precision (core/precision.h) the same float32 code runs on rounded
// copies of x, w and dy, and y, dx and dw are rounded to the format afterwards, as cuDNN's
// half and bfloat16 convolutions write them; the bias is added, and its gradient summed from
// the unrounded dy, in float32, as the GPU does after cuDNN.
#include "core/kernels/cpu/conv.h"

#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/kernels/cpu/conv_dnnl.h"
#include "core/kernels/cpu/elementwise.h"
#include "core/kernels/cpu/gemm.h"
#include "core/memory_format.h"
#include "core/precision.h"

namespace mt::core::cpu {

namespace {

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight
  int64_t ho, wo;      // output
  int64_t stride, pad;

  int64_t patch() const { return c * kh * kw; }  // rows of col
  int64_t pixels() const { return ho * wo; }     // columns of col
  // A 1x1 kernel with stride 1 and no padding: col is the input itself, no unfolding needed.
  bool pointwise() const { return kh == 1 && kw == 1 && stride == 1 && pad == 0; }
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& y, int64_t stride, int64_t pad) {
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[2],
          w.shape()[3], y.shape()[2], y.shape()[3], stride, pad};
}

// Per-thread scratch that survives between calls: unfolding buffers are large and reused every
// step, so allocating (and page-faulting) them anew each time would cost more than the copy.
enum Scratch { kCol = 0, kDcol = 1, kPadded = 2 };
float* scratch(Scratch slot, int64_t n) {
  thread_local std::vector<float> buffers[3];
  auto& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(n);
  return b.data();
}

// Padding is applied by copying the sample into a zero-bordered buffer first, so that the
// unfolding loops below are plain strided copies without bounds checks. The copy is small
// next to col (kh*kw times smaller).
int64_t padded_h(const Geometry& g) { return g.h + 2 * g.pad; }
int64_t padded_w(const Geometry& g) { return g.w + 2 * g.pad; }

const float* pad_input(const float* x, const Geometry& g) {
  if (g.pad == 0) return x;
  const int64_t hp = padded_h(g), wp = padded_w(g);
  float* buf = scratch(kPadded, g.c * hp * wp);
  std::fill(buf, buf + g.c * hp * wp, 0.0f);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.h; ++i) {
      const float* src = x + (c * g.h + i) * g.w;
      float* dst = buf + (c * hp + i + g.pad) * wp + g.pad;
      for (int64_t j = 0; j < g.w; ++j) dst[j] = src[j];
    }
  return buf;
}

// Unfolds one sample x[C, H, W] into col[C*kh*kw, Ho*Wo]: row (c, ki, kj) holds, for every
// output pixel (oh, ow), the input at (oh*stride + ki, ow*stride + kj) of the padded plane c.
void im2col(const float* x, const Geometry& g, float* col) {
  const float* src = pad_input(x, g);
  const int64_t hp = padded_h(g), wp = padded_w(g), s = g.stride;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        float* dst = col + ((c * g.kh + ki) * g.kw + kj) * g.pixels();
        const float* plane = src + (c * hp + ki) * wp + kj;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const float* in = plane + oh * s * wp;
          float* out = dst + oh * g.wo;
          // Stride 1 gets its own loop so that it vectorizes (the compiler cannot for a
          // runtime stride); rows are short, so this also beats a memcpy call.
          if (s == 1) {
#pragma omp simd
            for (int64_t ow = 0; ow < g.wo; ++ow) out[ow] = in[ow];
          } else {
            for (int64_t ow = 0; ow < g.wo; ++ow) out[ow] = in[ow * s];
          }
        }
      }
}

// The adjoint of im2col: every col entry is added back onto the pixel it was copied from
// (into the padded buffer, whose interior is then dx).
void col2im(const float* col, const Geometry& g, float* x) {
  const int64_t hp = padded_h(g), wp = padded_w(g), s = g.stride;
  float* dst = g.pad == 0 ? x : scratch(kPadded, g.c * hp * wp);
  std::fill(dst, dst + g.c * hp * wp, 0.0f);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const float* src = col + ((c * g.kh + ki) * g.kw + kj) * g.pixels();
        float* plane = dst + (c * hp + ki) * wp + kj;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const float* in = src + oh * g.wo;
          float* out = plane + oh * s * wp;
          if (s == 1) {
#pragma omp simd
            for (int64_t ow = 0; ow < g.wo; ++ow) out[ow] += in[ow];
          } else {
            for (int64_t ow = 0; ow < g.wo; ++ow) out[ow * s] += in[ow];
          }
        }
      }
  if (g.pad == 0) return;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t i = 0; i < g.h; ++i) {
      const float* src = dst + (c * hp + i + g.pad) * wp + g.pad;
      float* out = x + (c * g.h + i) * g.w;
      for (int64_t j = 0; j < g.w; ++j) out[j] = src[j];
    }
}

// The GEMM's right operand for sample xn: xn itself for a pointwise convolution, else its
// receptive fields unfolded into this thread's scratch.
const float* columns(const float* xn, const Geometry& g) {
  if (g.pointwise()) return xn;
  float* col = scratch(kCol, g.patch() * g.pixels());
  im2col(xn, g, col);
  return col;
}

// Splitting the batch across threads pays when every thread gets a sample and the whole
// convolution is big enough (~256K multiply-adds) to amortize waking the threads. With fewer
// samples (inference on one image) each GEMM is split across the threads instead: gemm() does
// that by itself when it is not inside a parallel region, and stays serial when it is.
bool parallel_over_batch(const Geometry& g) {
  const int64_t macs = g.n * g.o * g.patch() * g.pixels();
  return g.n > 1 && g.n >= omp_get_max_threads() && macs >= (int64_t{1} << 18);
}

}  // namespace

void conv2d_forward_reference(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                              int64_t padding, Tensor& y) {
  const Geometry g = geometry(x, w, y, stride, padding);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  float* py = y.data<float>();
  const int64_t in_size = g.c * g.h * g.w, out_size = g.o * g.pixels();

#pragma omp parallel for schedule(static) if (parallel_over_batch(g))
  for (int64_t n = 0; n < g.n; ++n) {
    const float* col = columns(px + n * in_size, g);
    float* yn = py + n * out_size;
    // Start from the bias and let the GEMM accumulate onto it (beta = 1): no second pass.
    if (pb) {
      for (int64_t o = 0; o < g.o; ++o) std::fill(yn + o * g.pixels(), yn + (o + 1) * g.pixels(), pb[o]);
    }
    gemm(false, false, g.o, g.pixels(), g.patch(), 1.0f, pw, g.patch(), col, g.pixels(),
         pb ? 1.0f : 0.0f, yn, g.pixels());
  }
}

void conv2d_backward_reference(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                               int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb) {
  const Geometry g = geometry(x, w, gy, stride, padding);
  const bool want_gx = gx.defined(), want_gw = gw.defined(), want_gb = gb.defined();
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pgy = gy.data<float>();
  float* pgx = want_gx ? gx.data<float>() : nullptr;
  const int64_t in_size = g.c * g.h * g.w, out_size = g.o * g.pixels();
  const int64_t w_size = g.o * g.patch();

  // One partial dW (and bias sum, in double) per thread; zero-filled so that a thread that
  // gets no samples contributes nothing.
  const int threads = parallel_over_batch(g) ? omp_get_max_threads() : 1;
  std::vector<float> gw_part(want_gw ? threads * w_size : 0, 0.0f);
  std::vector<double> gb_part(want_gb ? threads * g.o : 0, 0.0);

#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    // Contiguous chunks of samples per thread (not dynamic scheduling): which samples land
    // in which partial sum is fixed, so the reduction below is deterministic.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = g.n * t / nt, hi = g.n * (t + 1) / nt;
    for (int64_t n = lo; n < hi; ++n) {
      const float* gyn = pgy + n * out_size;
      if (want_gw) {
        const float* col = columns(px + n * in_size, g);
        gemm(false, true, g.o, g.patch(), g.pixels(), 1.0f, gyn, g.pixels(), col, g.pixels(),
             1.0f, gw_part.data() + t * w_size, g.patch());
      }
      if (want_gb) {
        double* acc = gb_part.data() + t * g.o;
        for (int64_t o = 0; o < g.o; ++o) {
          const float* row = gyn + o * g.pixels();
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < g.pixels(); ++i) s += row[i];
          acc[o] += s;
        }
      }
      if (want_gx) {
        float* gxn = pgx + n * in_size;
        float* dcol = g.pointwise() ? gxn : scratch(kDcol, g.patch() * g.pixels());
        gemm(true, false, g.patch(), g.pixels(), g.o, 1.0f, pw, g.patch(), gyn, g.pixels(),
             0.0f, dcol, g.pixels());
        if (!g.pointwise()) col2im(dcol, g, gxn);
      }
    }
  }

  if (want_gw) {
    float* out = gw.data<float>();
    std::copy(gw_part.begin(), gw_part.begin() + w_size, out);
    for (int t = 1; t < threads; ++t) {
      const float* part = gw_part.data() + t * w_size;
      for (int64_t i = 0; i < w_size; ++i) out[i] += part[i];
    }
  }
  if (want_gb) {
    float* out = gb.data<float>();
    for (int64_t o = 0; o < g.o; ++o) {
      double s = 0.0;
      for (int t = 0; t < threads; ++t) s += gb_part[t * g.o + o];
      out[o] = static_cast<float>(s);
    }
  }
}

namespace {

// An NCHW copy of a channels-last operand (itself when contiguous), for the paths that know
// only NCHW; an output so copied is copied back into its own format afterwards.
Tensor nchw(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), DType::Float32, t.device());
  copy(t, c);
  return c;
}
void copy_back(const Tensor& computed, Tensor& out) {
  if (out.defined() && !computed.same(out)) copy(computed, out);
}

void forward_nchw(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding,
                  Tensor& y, void (*kernel)(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, Tensor&)) {
  Tensor yc = nchw(y);
  kernel(nchw(x), w, bias, stride, padding, yc);
  copy_back(yc, y);
}

void backward_nchw(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride, int64_t padding,
                   Tensor& gx, Tensor& gw, Tensor& gb,
                   void (*kernel)(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, Tensor&, Tensor&,
                                  Tensor&)) {
  Tensor gxc = nchw(gx);
  kernel(nchw(x), w, nchw(gy), stride, padding, gxc, gw, gb);
  copy_back(gxc, gx);
}

// A shape oneDNN has no kernel for (it reports that when the primitive is made) falls back to
// the reference.
void conv2d_forward_fp32(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                         int64_t padding, Tensor& y) {
#ifdef MT_WITH_DNNL
  if (dnnl_conv::forward(x, w, bias, stride, padding, y)) return;
#endif
  forward_nchw(x, w, bias, stride, padding, y, conv2d_forward_reference);
}

void conv2d_backward_fp32(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                          int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb) {
#ifdef MT_WITH_DNNL
  if (dnnl_conv::backward(x, w, gy, stride, padding, gx, gw, gb)) return;
#endif
  backward_nchw(x, w, gy, stride, padding, gx, gw, gb, conv2d_backward_reference);
}

}  // namespace

bool conv_has_fast_impl() {
#ifdef MT_WITH_DNNL
  return true;
#else
  return false;
#endif
}

bool conv2d_prefers_channels_last() {
  return conv_has_fast_impl() && compute_precision() == ComputePrecision::FP32;
}

std::string conv2d_kernel_names(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding) {
#ifdef MT_WITH_DNNL
  const std::string names =
      dnnl_conv::kernel_names(x, w, stride, padding, is_channels_last(x), conv2d_prefers_channels_last());
  if (!names.empty()) return names;
#endif
  return "im2col";
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y) {
  const ComputePrecision p = compute_precision();
  if (p == ComputePrecision::FP32) return conv2d_forward_fp32(x, w, bias, stride, padding, y);
  if (!x.is_contiguous() || !y.is_contiguous())  // the rounding below works on NCHW
    return forward_nchw(x, w, bias, stride, padding, y, conv2d_forward);
  conv2d_forward_fp32(round_to_precision(x, p), round_to_precision(w, p), Tensor(), stride, padding, y);
  round_to_precision_(y, p);
  if (!bias.defined()) return;
  const int64_t n = y.shape()[0], o = y.shape()[1], pixels = y.shape()[2] * y.shape()[3];
  const float* pb = bias.data<float>();
  float* py = y.data<float>();
#pragma omp parallel for schedule(static) if (n * o * pixels > (1 << 16))
  for (int64_t i = 0; i < n * o; ++i) {
    const float b = pb[i % o];
    for (int64_t k = 0; k < pixels; ++k) py[i * pixels + k] += b;
  }
}

void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb) {
  const ComputePrecision p = compute_precision();
  if (p == ComputePrecision::FP32) return conv2d_backward_fp32(x, w, gy, stride, padding, gx, gw, gb);
  if (!x.is_contiguous() || !gy.is_contiguous() || (gx.defined() && !gx.is_contiguous()))
    return backward_nchw(x, w, gy, stride, padding, gx, gw, gb, conv2d_backward);
  if (gx.defined() || gw.defined()) {
    // dx reads only w and dy, dw only x and dy: round just what the requested products use.
    const Tensor xr = gw.defined() ? round_to_precision(x, p) : x;
    const Tensor wr = gx.defined() ? round_to_precision(w, p) : w;
    Tensor no_bias;
    conv2d_backward_fp32(xr, wr, round_to_precision(gy, p), stride, padding, gx, gw, no_bias);
    if (gx.defined()) round_to_precision_(gx, p);
    if (gw.defined()) round_to_precision_(gw, p);
  }
  if (gb.defined()) {
    Tensor none_x, none_w;
    conv2d_backward_fp32(x, w, gy, stride, padding, none_x, none_w, gb);
  }
}

}  // namespace mt::core::cpu
