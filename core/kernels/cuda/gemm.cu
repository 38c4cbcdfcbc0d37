// Row-major GEMM through column-major cuBLAS. A row-major matrix is the column-major storage of
// its transpose, so C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T (column-major): the
// same call with the operands swapped and m, n exchanged. Leading dimensions stay as they are.
#include <climits>

#include "core/kernels/cuda/gemm.h"
#include "core/kernels/cuda/handles.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {
int to_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= INT_MAX, "GEMM ", what, " ", v, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(v);
}
cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// C = beta * C for each batch entry: the whole product when k == 0 (cuBLAS rejects the
// leading dimensions an empty operand has, so that case does not reach it).
__global__ void scale_matrices(float* c, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                               int64_t batch, float beta) {
  const int64_t total = batch * m * n;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t bi = i / (m * n), r = (i / n) % m, col = i % n;
    float& v = c[bi * stride_c + r * ldc + col];
    v = beta == 0.0f ? 0.0f : beta * v;  // beta 0 overwrites, as BLAS does (NaN in C is dropped)
  }
}

// Whether cuBLAS is needed: not for an empty C, nor for k == 0 (C = beta * C, done here).
bool needs_cublas(int64_t m, int64_t n, int64_t k, float beta, float* c, int64_t ldc, int64_t stride_c,
                  int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return false;
  if (k > 0) return true;
  launch(scale_matrices, blocks_for(batch * m * n), c, m, n, ldc, stride_c, batch, beta);
  return false;
}
}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_strided_batched(ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

void gemm_strided_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                          int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                          int64_t batch) {
  if (!needs_cublas(m, n, k, beta, c, ldc, stride_c, batch)) return;
  cublasHandle_t h = cublas_handle();
  if (batch == 1) {
    MT_CUBLAS_CHECK(cublasSgemm(h, op(tb), op(ta), to_int(n, "n"), to_int(m, "m"), to_int(k, "k"),
                                &alpha, b, to_int(ldb, "ldb"), a, to_int(lda, "lda"), &beta, c,
                                to_int(ldc, "ldc")));
    return;
  }
  MT_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op(tb), op(ta), to_int(n, "n"), to_int(m, "m"),
                                            to_int(k, "k"), &alpha, b, to_int(ldb, "ldb"), stride_b,
                                            a, to_int(lda, "lda"), stride_a, &beta, c,
                                            to_int(ldc, "ldc"), stride_c, to_int(batch, "batch")));
}

void gemm_strided_batched_ex(DType input_type, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             float alpha, const void* a, int64_t lda, int64_t stride_a, const void* b,
                             int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                             int64_t stride_c, int64_t batch) {
  MT_CHECK(input_type == DType::BFloat16 || input_type == DType::Float16,
           "internal: gemm_strided_batched_ex takes bfloat16 or float16 inputs, got ", dtype_name(input_type));
  if (!needs_cublas(m, n, k, beta, c, ldc, stride_c, batch)) return;
  const cudaDataType_t in = input_type == DType::BFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasHandle_t h = cublas_handle();
  if (batch == 1) {
    MT_CUBLAS_CHECK(cublasGemmEx(h, op(tb), op(ta), to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha,
                                 b, in, to_int(ldb, "ldb"), a, in, to_int(lda, "lda"), &beta, c, CUDA_R_32F,
                                 to_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  MT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, op(tb), op(ta), to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b, in, to_int(ldb, "ldb"),
      stride_b, a, in, to_int(lda, "lda"), stride_a, &beta, c, CUDA_R_32F, to_int(ldc, "ldc"), stride_c,
      to_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace mt::core::cuda
