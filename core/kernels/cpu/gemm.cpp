#include "core/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

namespace mt::core::cpu {

void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Below ~1 MFLOP the fork/join costs more than it saves.
  if (threads <= 1 || m * n * k < (1 << 20)) return gemm_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Split the larger of M and N into one block per thread; each block is an independent GEMM.
  const bool split_rows = m >= n;
  const int64_t total = split_rows ? m : n;
  const int64_t block = (total + threads - 1) / threads;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    const int64_t lo = t * block, len = std::min(block, total - lo);
    if (len <= 0) continue;
    if (split_rows) {
      const float* a_blk = ta ? a + lo : a + lo * lda;  // rows of op(A)
      gemm_serial(ta, tb, len, n, k, alpha, a_blk, lda, b, ldb, beta, c + lo * ldc, ldc);
    } else {
      const float* b_blk = tb ? b + lo * ldb : b + lo;  // columns of op(B)
      gemm_serial(ta, tb, m, len, k, alpha, a, lda, b_blk, ldb, beta, c + lo, ldc);
    }
  }
}

}  // namespace mt::core::cpu
