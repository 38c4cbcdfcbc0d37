// exp and erf for vectorized loops: glibc's libmvec has them for SSE, AVX2 and AVX-512, 4 to 16
// floats a call, but <math.h> declares them (which is what lets the compiler call them from a
// vectorized loop) only under -ffast-math, and that would also drop the infinity and NaN handling
// the kernels rely on (masked softmax's -inf, the step guard's NaN check). These declarations
// are the ones glibc's math-vector.h makes, so a loop over std::exp or std::erf of floats
// vectorizes: MT_VECTOR_CLONES picks the width, libmvec the kernel. Without libmvec (not glibc,
// or CMake did not find it: MT_HAVE_LIBMVEC unset) the loops call the scalar functions.
//
// A vector call and the scalar one may round differently in the last bit, so a kernel that
// uses these should give each element the same one whatever the thread count: rows of fixed
// length (softmax), or fixed blocks (vector_blocks below).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(MT_HAVE_LIBMVEC) && defined(_OPENMP) && defined(__x86_64__) && !defined(__CUDACC__)
extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
}
#endif

namespace mt::core::cpu {

// Elementwise loops over n values run in blocks of this many, split among the threads whole:
// every element then falls in the same place of a vectorized block (body or tail) for any
// thread count, and gets the same bits.
constexpr int64_t kVectorBlock = 1024;

inline int64_t vector_blocks(int64_t n) { return (n + kVectorBlock - 1) / kVectorBlock; }

// log(sum(exp(row))) of one row of k logits: the maximum subtracted first (the exp of a large
// logit would overflow), the sum in double. `simd` allows the per-lane partial max and sum.
inline float row_log_sum_exp(const float* row, int64_t k) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < k; ++j) mx = std::max(mx, row[j]);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < k; ++j) sum += std::exp(row[j] - mx);
  return mx + static_cast<float>(std::log(sum));
}

// out = softmax(row) * scale, from the row's log-sum-exp: the cross-entropy's gradient before
// the target's -scale.
inline void row_softmax_times(const float* row, int64_t k, float lse, float scale, float* out) {
  for (int64_t j = 0; j < k; ++j) out[j] = std::exp(row[j] - lse) * scale;
}

}  // namespace mt::core::cpu
