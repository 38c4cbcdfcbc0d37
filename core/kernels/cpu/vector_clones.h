// MT_VECTOR_CLONES: a loop kernel compiled three times, for AVX-512, AVX2 and baseline x86-64,
// with the widest the CPU has chosen once when the program loads (GCC's target_clones).
//
// The build targets baseline x86-64 (SSE2), so one binary runs on any x86-64 machine; oneDNN
// and OpenBLAS pick their own kernels at run time, but the compiler's loops stay 4 floats wide.
// That is enough for a loop that only streams memory, not for one that computes per element
// (batch norm's backward with a fused ReLU: a multiply-add, a compare and a select per value),
// which then runs at the core's speed. The clones give such loops the vector width the core
// has; OpenMP's outlined loop bodies are cloned with them. A clone is chosen for the whole
// program, so a forward pass and its backward always run the same instructions. Builds with
// AddressSanitizer keep the one baseline version: its checks, not the vector width, are the
// point there, and ifunc dispatch is one more moving part under the sanitizer's runtime.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MT_VECTOR_CLONES
#endif
