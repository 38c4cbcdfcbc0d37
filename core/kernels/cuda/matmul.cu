// Matmul, linear and the bias gradient on the GPU, through gemm.h (cuBLAS). Under a 16-bit
// compute precision (core/precision.h) the two operands are first cast into contiguous
// bfloat16/float16 scratch (kernels/cuda/cast.h; a transposed view is materialized by the same
// pass) and multiplied by cublasGemm(StridedBatched)Ex into the float32 output.
#include <algorithm>

#include "core/kernels/cuda/cast.h"
#include "core/kernels/cuda/gemm.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/matmul.h"

namespace mt::core::cuda {

namespace {

// A matrix view as BLAS sees it, as in kernels/cpu/matmul.cpp: pointer, leading dimension and
// whether it is stored transposed. `keep` holds a contiguous copy alive when one was needed.
struct BlasMatrix {
  const float* ptr;
  int64_t ld;
  bool trans;
  int64_t batch_stride;  // elements between consecutive matrices of a 3-d operand
  Tensor keep;
};

// t is [rows, cols] or [batch, rows, cols]; the last two dimensions are the matrix.
BlasMatrix as_blas(const Tensor& t) {
  const int64_t nd = t.dim(), r = nd - 2, c = nd - 1;
  const auto& st = t.strides();
  const int64_t rows = t.shape()[r], cols = t.shape()[c];
  const int64_t bstride = nd == 3 ? st[0] : 0;
  if (st[c] == 1 || cols == 1) return {t.data<float>(), std::max<int64_t>({st[r], cols, 1}), false, bstride, {}};
  if (st[r] == 1 || rows == 1) return {t.data<float>(), std::max<int64_t>({st[c], rows, 1}), true, bstride, {}};
  Tensor cont = t.contiguous();
  return {cont.data<float>(), std::max<int64_t>(cols, 1), false, nd == 3 ? rows * cols : 0, cont};
}

// out[r, j] = bias[j]: the GEMM then accumulates onto it (beta = 1), as on the CPU.
__global__ void broadcast_rows(const float* bias, float* out, int64_t n, int64_t o) {
  for (int64_t i = first_index(); i < n * o; i += grid_stride()) out[i] = bias[i % o];
}

// The bias gradient gb[j] = sum over rows of g[r, j], in two coalesced passes: the rows are cut
// into `chunks` slices; thread (chunk, j) sums column j over its slice in order, in double
// (neighbouring threads read neighbouring columns), and a second pass adds the slices in order.
// Many rows over few columns (a classifier's 10 outputs over a large batch) thus use many
// threads, not one per column. With one chunk it is the CPU loop's order.
__global__ void column_partial_sums(const float* g, double* partial, int64_t n, int64_t o, int64_t chunks) {
  const int64_t per = (n + chunks - 1) / chunks;
  for (int64_t e = first_index(); e < chunks * o; e += grid_stride()) {
    const int64_t chunk = e / o, j = e % o;
    const int64_t end = (chunk + 1) * per < n ? (chunk + 1) * per : n;
    double s = 0.0;
    for (int64_t r = chunk * per; r < end; ++r) s += g[r * o + j];
    partial[e] = s;
  }
}

__global__ void finish_column_sums(const double* partial, float* gb, int64_t o, int64_t chunks) {
  for (int64_t j = first_index(); j < o; j += grid_stride()) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * o + j];
    gb[j] = static_cast<float>(s);
  }
}

// out = a b with both operands rounded to p (2-d, or 3-d batched); out is contiguous float32.
void matmul_reduced(const Tensor& a, const Tensor& b, Tensor& out, ComputePrecision p) {
  const int64_t nd = a.dim();
  const int64_t m = a.shape()[nd - 2], k = a.shape()[nd - 1], n = b.shape()[nd - 1];
  const int64_t batch = nd == 3 ? a.shape()[0] : 1;
  const Tensor ah = to_reduced(a, p), bh = to_reduced(b, p);  // contiguous: row-major, untransposed
  gemm_strided_batched_ex(storage_dtype(p), false, false, m, n, k, 1.0f, ah.raw_data(), std::max<int64_t>(k, 1),
                          m * k, bh.raw_data(), std::max<int64_t>(n, 1), k * n, 0.0f, out.data<float>(),
                          std::max<int64_t>(n, 1), m * n, batch);
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (const ComputePrecision p = compute_precision(); p != ComputePrecision::FP32) return matmul_reduced(a, b, out, p);
  BlasMatrix A = as_blas(a), B = as_blas(b);
  const int64_t nd = a.dim();
  const int64_t m = a.shape()[nd - 2], k = a.shape()[nd - 1], n = b.shape()[nd - 1];
  if (nd == 2) return gemm(A.trans, B.trans, m, n, k, 1.0f, A.ptr, A.ld, B.ptr, B.ld, 0.0f, out.data<float>(), n);
  gemm_strided_batched(A.trans, B.trans, m, n, k, 1.0f, A.ptr, A.ld, A.batch_stride, B.ptr, B.ld,
                       B.batch_stride, 0.0f, out.data<float>(), n, m * n, a.shape()[0]);
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t n = x.shape()[0], in = x.shape()[1], o = w.shape()[0];
  float* po = out.data<float>();
  float beta = 0.0f;
  if (bias.defined() && n * o > 0) {
    launch(broadcast_rows, blocks_for(n * o), bias.data<float>(), po, n, o);
    beta = 1.0f;
  }
  if (const ComputePrecision p = compute_precision(); p != ComputePrecision::FP32) {
    const Tensor xh = to_reduced(x, p), wh = to_reduced(w, p);
    gemm_strided_batched_ex(storage_dtype(p), false, true, n, o, in, 1.0f, xh.raw_data(),
                            std::max<int64_t>(in, 1), 0, wh.raw_data(), std::max<int64_t>(in, 1), 0, beta,
                            po, std::max<int64_t>(o, 1), 0, 1);
    return;
  }
  gemm(false, true, n, o, in, 1.0f, x.data<float>(), std::max<int64_t>(in, 1), w.data<float>(),
       std::max<int64_t>(in, 1), beta, po, o);
}

void bias_grad(const Tensor& g, Tensor& gb) {
  const int64_t n = g.shape()[0], o = g.shape()[1];
  if (o == 0) return;
  // About 64k threads in all, each summing at least 16 rows: a pure function of the shape.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((int64_t{1} << 16) / o, n / 16));
  Tensor scratch = Tensor::empty({2 * chunks * o}, DType::Float32, g.device());  // chunks * o doubles
  auto* partial = static_cast<double*>(scratch.raw_data());
  launch(column_partial_sums, blocks_for(chunks * o), g.data<float>(), partial, n, o, chunks);
  launch(finish_column_sums, blocks_for(o), partial, gb.data<float>(), o, chunks);
}

}  // namespace mt::core::cuda
