// Process-wide numeric switches of the CUDA backend.
#pragma once
#include <cstddef>

namespace mt::core::cuda {

// TF32 tensor cores for float32 matrix products and convolutions (cuBLAS and cuDNN). Off by
// default: TF32 keeps 10 mantissa bits, so results would drift from the CPU by ~1e-3 relative;
// turning it on is a speed/precision trade the user makes explicitly.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The most device memory one cuDNN convolution may use as scratch (default 1 GiB). Algorithms
// that need more are not chosen.
void set_conv_workspace_limit(size_t bytes);
size_t conv_workspace_limit();

// cuDNN algorithm choice: false (default) takes cuDNN's heuristics (cudnnGet*_v7, instant and
// deterministic); true times the candidates once per shape (cudnnFind*), which finds faster
// algorithms but costs a few seconds the first time a shape is seen.
void set_conv_benchmark(bool on);
bool conv_benchmark();

// Whether convolutions go through cuDNN (when built with it; default true) or through the
// im2col + cuBLAS kernels, which every CUDA build has (useful to cross-check the two).
void set_use_cudnn(bool on);
bool use_cudnn();
bool built_with_cudnn();

}  // namespace mt::core::cuda
