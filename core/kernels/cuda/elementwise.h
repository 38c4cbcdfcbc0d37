// CUDA twins of kernels/cpu/elementwise.h (same signatures, same semantics): fill, strided copy,
// dtype conversion, broadcasting binary ops, unary ops, in-place axpy/scale. Tensors live on
// the GPU; outputs are allocated by the caller. Plain C++ header: ops include it from .cpp files.
#pragma once
#include "core/kernels/cpu/elementwise.h"  // BinaryOp, UnaryOp
#include "core/tensor.h"

namespace mt::core::cuda {
void fill(Tensor& t, double value);
void copy(const Tensor& src, Tensor& dst);     // same shape, same dtype, any strides
void convert(const Tensor& src, Tensor& dst);  // same shape, contiguous, different dtypes
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, float s, Tensor& out);  // a op s
void unary(UnaryOp op, const Tensor& x, Tensor& out);
void pow_scalar(const Tensor& x, float p, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& y);  // y += alpha * x (y contiguous)
void scale(Tensor& y, float factor);                 // y *= factor (y contiguous)
}  // namespace mt::core::cuda
