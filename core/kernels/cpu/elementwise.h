// CPU kernels for elementwise work: fill, strided copy, dtype conversion, broadcasting binary
// ops, unary ops, and in-place axpy/scale. Output tensors are allocated by the caller
// (contiguous); inputs may have any strides, including 0 (broadcast).
#pragma once
#include "core/tensor.h"

namespace mt::core {

enum class BinaryOp { Add, Sub, Mul, Div };
enum class UnaryOp { Neg, Exp, Log, Sqrt, Abs, Square, Sign, Tanh, Sigmoid };

namespace cpu {
void fill(Tensor& t, double value);
void copy(const Tensor& src, Tensor& dst);     // same shape, same dtype, any strides
void convert(const Tensor& src, Tensor& dst);  // same shape, contiguous, different dtypes
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void binary_scalar(BinaryOp op, const Tensor& a, float s, Tensor& out);  // a op s
void unary(UnaryOp op, const Tensor& x, Tensor& out);
void pow_scalar(const Tensor& x, float p, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& y);  // y += alpha * x (y contiguous)
void scale(Tensor& y, float factor);                 // y *= factor (y contiguous)
}  // namespace cpu
}  // namespace mt::core
