// Single-precision GEMM on the GPU through cuBLAS, row-major like cpu::gemm:
// C = alpha * op(A) op(B) + beta * C. Pointers are device memory. TF32 tensor cores are used
// only after set_allow_tf32(true) (math_mode.h); by default results match FP32 FMA arithmetic.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace mt::core::cuda {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// `batch` independent products; operand i starts at a + i * stride_a (likewise b, c). A stride
// of 0 reuses one operand for every product.
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                          int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                          int64_t batch);

// Mixed precision (core/precision.h): a and b hold `input_type` values (BFloat16 or Float16),
// c is float32, and the products accumulate in float32 (cublasGemmStridedBatchedEx with
// CUDA_R_16BF/CUDA_R_16F inputs, CUDA_R_32F output, CUBLAS_COMPUTE_32F: tensor cores). Same
// row-major conventions as above; batch 1 is a plain cublasGemmEx.
void gemm_strided_batched_ex(DType input_type, bool trans_a, bool trans_b, int64_t m, int64_t n,
                             int64_t k, float alpha, const void* a, int64_t lda, int64_t stride_a,
                             const void* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                             int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace mt::core::cuda
