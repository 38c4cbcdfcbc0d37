#include "core/kernels/cpu/matmul.h"

#include "core/kernels/cpu/gemm.h"
#include "core/precision.h"

namespace mt::core::cpu {

namespace {
// A 2-d matrix view as BLAS sees it: pointer, leading dimension, and whether transposed.
struct BlasMatrix {
  const float* ptr;
  int64_t ld;
  bool trans;
  Tensor keep;  // holds a contiguous copy alive when one was needed
};

BlasMatrix as_blas(const Tensor& t, int64_t rows_dim, int64_t cols_dim) {
  const auto& st = t.strides();
  const int64_t rows = t.shape()[rows_dim], cols = t.shape()[cols_dim];
  if (st[cols_dim] == 1 || cols == 1) return {t.data<float>(), std::max<int64_t>(st[rows_dim], cols), false, {}};
  if (st[rows_dim] == 1 || rows == 1) return {t.data<float>(), std::max<int64_t>(st[cols_dim], rows), true, {}};
  Tensor c = t.contiguous();
  return {c.data<float>(), cols, false, c};
}

void matmul_fp32(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dim() == 2) {
    BlasMatrix A = as_blas(a, 0, 1), B = as_blas(b, 0, 1);
    gemm(A.trans, B.trans, a.shape()[0], b.shape()[1], a.shape()[1], 1.0f, A.ptr, A.ld, B.ptr,
         B.ld, 0.0f, out.data<float>(), b.shape()[1]);
    return;
  }
  // Batched: one GEMM per batch entry, batch entries in parallel.
  const int64_t batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (batch > 1 && batch * m * n * k > (1 << 18))
  for (int64_t i = 0; i < batch; ++i) {
    Tensor ai = a.detach().select(0, i), bi = b.detach().select(0, i);
    BlasMatrix A = as_blas(ai, 0, 1), B = as_blas(bi, 0, 1);
    gemm_serial(A.trans, B.trans, m, n, k, 1.0f, A.ptr, A.ld, B.ptr, B.ld, 0.0f, po + i * m * n, n);
  }
}

}  // namespace

// Under a 16-bit compute precision the float32 GEMM runs on rounded copies of the operands:
// the products of rounded values are exact in float32, so this is the GPU's tensor-core
// arithmetic up to summation order (core/precision.h).
void matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (const ComputePrecision p = compute_precision(); p != ComputePrecision::FP32)
    return matmul_fp32(round_to_precision(a, p), round_to_precision(b, p), out);
  matmul_fp32(a, b, out);
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t n = x.shape()[0], in = x.shape()[1], o = w.shape()[0];
  float* po = out.data<float>();
  float beta = 0.0f;
  if (bias.defined()) {
    const float* pb = bias.data<float>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < o; ++j) po[r * o + j] = pb[j];
    beta = 1.0f;
  }
  if (const ComputePrecision p = compute_precision(); p != ComputePrecision::FP32) {
    const Tensor xr = round_to_precision(x, p), wr = round_to_precision(w, p);
    gemm(false, true, n, o, in, 1.0f, xr.data<float>(), in, wr.data<float>(), in, beta, po, o);
    return;
  }
  gemm(false, true, n, o, in, 1.0f, x.data<float>(), in, w.data<float>(), in, beta, po, o);
}

void bias_grad(const Tensor& g, Tensor& gb) {
  const int64_t n = g.shape()[0], o = g.shape()[1];
  const float* pg = g.data<float>();
  float* pb = gb.data<float>();
  for (int64_t j = 0; j < o; ++j) pb[j] = 0.0f;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < o; ++j) pb[j] += pg[r * o + j];
}

}  // namespace mt::core::cpu
