// Casts between float32 and the 16-bit formats of mixed precision (core/precision.h), for the
// reduced-precision matmul and convolution kernels: their float32 inputs are rounded into
// bfloat16/float16 scratch (from the caching allocator) that cuBLAS and cuDNN read, and
// cuDNN's 16-bit outputs are widened back into the float32 tensors the ops return. The
// rounding is core/precision.h's, the same function the CPU emulation calls, so both devices
// feed their products bit-identical inputs.
#pragma once
#include "core/precision.h"
#include "core/tensor.h"

namespace mt::core::cuda {

// A new contiguous tensor of storage_dtype(p) (BFloat16 or Float16) holding x (float32, any
// strides) rounded to nearest even, in x's logical order. p must not be FP32.
Tensor to_reduced(const Tensor& x, ComputePrecision p);
// out (contiguous float32) = h (contiguous BFloat16 or Float16, same number of elements).
void from_reduced(const Tensor& h, Tensor& out);
// A contiguous float32 copy of x with every value rounded to p (the emulation's inputs).
Tensor rounded_copy(const Tensor& x, ComputePrecision p);
// Rounds a contiguous float32 tensor in place.
void round_in_place(Tensor& x, ComputePrecision p);

}  // namespace mt::core::cuda
