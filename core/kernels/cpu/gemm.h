// Single-precision GEMM on the CPU through OpenBLAS: C = alpha * op(A) op(B) + beta * C,
// row-major. OpenBLAS runs single-threaded (see runtime.cpp); gemm() splits large products
// across OpenMP threads itself, so kernels that already run in parallel (conv over the batch)
// can call it without oversubscribing the cores.
#pragma once
#include <cstdint>

namespace mt::core::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product on one thread, for callers that are already inside a parallel region.
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc);

}  // namespace mt::core::cpu
