#include "core/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/kernels/cpu/strided_iter.h"
#include "core/memory_format.h"

namespace mt::core::cpu {

namespace {

template <typename T>
void fill_typed(Tensor& t, T v) {
  T* p = static_cast<T*>(t.raw_data());
  if (t.is_contiguous()) {
    std::fill(p, p + t.numel(), v);
    return;
  }
  for_each_row<1>(t.shape(), {&t.strides()}, [&](auto off, auto st, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
  });
}

template <typename T>
void copy_typed(const Tensor& src, Tensor& dst) {
  const T* s = static_cast<const T*>(src.raw_data());
  T* d = static_cast<T*>(dst.raw_data());
  for_each_row<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](auto off, auto st, int64_t n) {
    if (st[0] == 1 && st[1] == 1) {
      std::memcpy(d + off[1], s + off[0], n * sizeof(T));
    } else {
      for (int64_t i = 0; i < n; ++i) d[off[1] + i * st[1]] = s[off[0] + i * st[0]];
    }
  });
}

// Between NCHW and channels-last each sample is a matrix transpose, [C, H*W] <-> [H*W, C]: done
// in tiles that fit the L1 cache, which makes it a copy at memory speed, where the generic
// strided loop would read one element per cache line along the short rows of channels.
void transpose_samples(const float* s, float* d, int64_t n, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(static) if (n * rows * cols > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
      const float* in = s + i * rows * cols;
      float* out = d + i * rows * cols;
      const int64_t r0 = (t / col_tiles) * kTile, c0 = (t % col_tiles) * kTile;
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
    }
}

template <typename Op>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
  // One flat loop when all three have the same shape and the same dense order (contiguous, or
  // channels-last: core/memory_format.h).
  if (same_dense_order(a, out) && same_dense_order(b, out)) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) po[i] = op(pa[i], pb[i]);
    return;
  }
  // Broadcast: give each input the output's rank, with stride 0 along broadcast dimensions.
  const int64_t nd = out.dim();
  Shape sa(nd, 0), sb(nd, 0);
  for (int64_t d = 0; d < nd; ++d) {
    int64_t da = d - (nd - a.dim()), db = d - (nd - b.dim());
    if (da >= 0 && a.shape()[da] != 1) sa[d] = a.strides()[da];
    if (db >= 0 && b.shape()[db] != 1) sb[d] = b.strides()[db];
  }
  const Shape so = out.strides();
  for_each_row<3>(out.shape(), {&sa, &sb, &so}, [&](auto off, auto st, int64_t len) {
    const float* x = pa + off[0];
    const float* y = pb + off[1];
    float* z = po + off[2];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == 0) {
      const float yv = y[0];
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i], yv);
    } else if (st[0] == 0 && st[1] == 1) {
      const float xv = x[0];
      for (int64_t i = 0; i < len; ++i) z[i] = op(xv, y[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i * st[0]], y[i * st[1]]);
    }
  });
}

template <typename Op>
void unary_loop(const Tensor& x, Tensor& out, Op op) {
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) po[i] = op(px[i]);
}

}  // namespace

void fill(Tensor& t, double value) {
  switch (t.dtype()) {
    case DType::Float32: fill_typed<float>(t, static_cast<float>(value)); break;
    case DType::Int64: fill_typed<int64_t>(t, static_cast<int64_t>(value)); break;
    case DType::UInt8: fill_typed<uint8_t>(t, static_cast<uint8_t>(value)); break;
    default: MT_FAIL("fill: no CPU kernel for ", dtype_name(t.dtype()));
  }
}

void copy(const Tensor& src, Tensor& dst) {
  MT_CHECK(src.dtype() == dst.dtype(), "copy: dtype mismatch");
  if (dst.nbytes() == 0) return;  // an empty tensor may have no storage: memcpy(nullptr) is undefined
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), dst.nbytes());
    return;
  }
  if (dst.dtype() == DType::Float32 && dst.dim() == 4) {
    const int64_t n = dst.shape()[0], c = dst.shape()[1], hw = dst.shape()[2] * dst.shape()[3];
    if (is_channels_last(src) && dst.is_contiguous()) return transpose_samples(src.data<float>(), dst.data<float>(), n, hw, c);
    if (src.is_contiguous() && is_channels_last(dst)) return transpose_samples(src.data<float>(), dst.data<float>(), n, c, hw);
  }
  switch (element_size(dst.dtype())) {
    case 1: copy_typed<uint8_t>(src, dst); break;
    case 2: copy_typed<uint16_t>(src, dst); break;
    case 4: copy_typed<uint32_t>(src, dst); break;
    case 8: copy_typed<uint64_t>(src, dst); break;
  }
}

void convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  auto run = [&](auto* s, auto* d) {
    using D = std::remove_pointer_t<decltype(d)>;
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
  };
  auto with_dst = [&](auto* s) {
    switch (dst.dtype()) {
      case DType::Float32: run(s, dst.data<float>()); break;
      case DType::Int64: run(s, dst.data<int64_t>()); break;
      case DType::UInt8: run(s, dst.data<uint8_t>()); break;
      default: MT_FAIL("to(", dtype_name(dst.dtype()), "): no CPU conversion");
    }
  };
  switch (src.dtype()) {
    case DType::Float32: with_dst(src.data<float>()); break;
    case DType::Int64: with_dst(src.data<int64_t>()); break;
    case DType::UInt8: with_dst(src.data<uint8_t>()); break;
    default: MT_FAIL("to(): no CPU conversion from ", dtype_name(src.dtype()));
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
    case BinaryOp::Add: binary_loop(a, b, out, [](float x, float y) { return x + y; }); break;
    case BinaryOp::Sub: binary_loop(a, b, out, [](float x, float y) { return x - y; }); break;
    case BinaryOp::Mul: binary_loop(a, b, out, [](float x, float y) { return x * y; }); break;
    case BinaryOp::Div: binary_loop(a, b, out, [](float x, float y) { return x / y; }); break;
  }
}

void binary_scalar(BinaryOp op, const Tensor& a, float s, Tensor& out) {
  switch (op) {
    case BinaryOp::Add: unary_loop(a, out, [s](float x) { return x + s; }); break;
    case BinaryOp::Sub: unary_loop(a, out, [s](float x) { return x - s; }); break;
    case BinaryOp::Mul: unary_loop(a, out, [s](float x) { return x * s; }); break;
    case BinaryOp::Div: unary_loop(a, out, [s](float x) { return x / s; }); break;
  }
}

void unary(UnaryOp op, const Tensor& x, Tensor& out) {
  switch (op) {
    case UnaryOp::Neg: unary_loop(x, out, [](float v) { return -v; }); break;
    case UnaryOp::Exp: unary_loop(x, out, [](float v) { return std::exp(v); }); break;
    case UnaryOp::Log: unary_loop(x, out, [](float v) { return std::log(v); }); break;
    case UnaryOp::Sqrt: unary_loop(x, out, [](float v) { return std::sqrt(v); }); break;
    case UnaryOp::Abs: unary_loop(x, out, [](float v) { return std::fabs(v); }); break;
    case UnaryOp::Square: unary_loop(x, out, [](float v) { return v * v; }); break;
    case UnaryOp::Sign: unary_loop(x, out, [](float v) { return float((v > 0) - (v < 0)); }); break;
    case UnaryOp::Tanh: unary_loop(x, out, [](float v) { return std::tanh(v); }); break;
    case UnaryOp::Sigmoid: unary_loop(x, out, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }); break;
  }
}

void pow_scalar(const Tensor& x, float p, Tensor& out) {
  unary_loop(x, out, [p](float v) { return std::pow(v, p); });
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  Tensor xc = x.is_contiguous() ? x : x.contiguous();
  const float* px = xc.data<float>();
  float* py = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void scale(Tensor& y, float factor) {
  float* py = y.data<float>();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) py[i] *= factor;
}

}  // namespace mt::core::cpu
