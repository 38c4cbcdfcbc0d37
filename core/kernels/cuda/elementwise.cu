// Elementwise kernels. Each operation is a runtime switch inside one kernel rather than a
// template per operation: the switch is uniform across a warp (every thread takes the same
// branch), so it costs next to nothing, and the build stays small.
#include <cuda_runtime.h>

#include <cstring>

#include "core/kernels/cuda/elementwise.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/strided.cuh"

namespace mt::core::cuda {

namespace {

// ---- operations, written as in kernels/cpu/elementwise.cpp

__device__ inline float apply_binary(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
  }
  return 0.0f;
}

__device__ inline float apply_unary(UnaryOp op, float v) {
  switch (op) {
    case UnaryOp::Neg: return -v;
    case UnaryOp::Exp: return expf(v);
    case UnaryOp::Log: return logf(v);
    case UnaryOp::Sqrt: return sqrtf(v);
    case UnaryOp::Abs: return fabsf(v);
    case UnaryOp::Square: return v * v;
    case UnaryOp::Sign: return float((v > 0) - (v < 0));
    case UnaryOp::Tanh: return tanhf(v);
    case UnaryOp::Sigmoid: return 1.0f / (1.0f + expf(-v));
  }
  return 0.0f;
}

// ---- kernels

template <typename T>
__global__ void fill_contiguous(T* p, int64_t n, T v) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) p[i] = v;
}

template <typename T>
__global__ void fill_strided(T* p, int64_t n, StridedIndexer<1> ix, T v) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    ix.offsets(i, off);
    p[off[0]] = v;
  }
}

// Copies by element size: a copy moves bits, so only the width matters.
template <typename T>
__global__ void copy_strided(const T* src, T* dst, int64_t n, StridedIndexer<2> ix) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[1]] = src[off[0]];
  }
}

template <typename S, typename D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = static_cast<D>(src[i]);
}

__global__ void binary_contiguous(BinaryOp op, const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = apply_binary(op, a[i], b[i]);
}

__global__ void binary_broadcast(BinaryOp op, const float* a, const float* b, float* out, int64_t n,
                                 StridedIndexer<2> ix) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    ix.offsets(i, off);
    out[i] = apply_binary(op, a[off[0]], b[off[1]]);
  }
}

__global__ void binary_scalar_kernel(BinaryOp op, const float* a, float s, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = apply_binary(op, a[i], s);
}

__global__ void unary_kernel(UnaryOp op, const float* x, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = apply_unary(op, x[i]);
}

__global__ void pow_kernel(const float* x, float p, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = powf(x[i], p);
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float* y, float factor, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] *= factor;
}

template <typename T>
void fill_typed(Tensor& t, T v) {
  const int64_t n = t.numel();
  if (n == 0) return;
  T* p = static_cast<T*>(t.raw_data());
  if (t.is_contiguous()) {
    launch(fill_contiguous<T>, blocks_for(n), p, n, v);
  } else {
    const Shape* st[1] = {&t.strides()};
    launch(fill_strided<T>, blocks_for(n), p, n, make_indexer<1>(t.shape(), st), v);
  }
}

template <typename T>
void copy_typed(const Tensor& src, Tensor& dst) {
  const int64_t n = dst.numel();
  const Shape* st[2] = {&src.strides(), &dst.strides()};
  launch(copy_strided<T>, blocks_for(n), static_cast<const T*>(src.raw_data()),
         static_cast<T*>(dst.raw_data()), n,
         make_indexer<2>(dst.shape(), st));
}

template <typename S, typename D>
void convert_typed(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  launch(convert_kernel<S, D>, blocks_for(n), static_cast<const S*>(src.raw_data()),
         static_cast<D*>(dst.raw_data()), n);
}

template <typename S>
void convert_from(const Tensor& src, Tensor& dst) {
  switch (dst.dtype()) {
    case DType::Float32: convert_typed<S, float>(src, dst); break;
    case DType::Int64: convert_typed<S, int64_t>(src, dst); break;
    case DType::UInt8: convert_typed<S, uint8_t>(src, dst); break;
    default: MT_FAIL("to(", dtype_name(dst.dtype()), "): no CUDA conversion");
  }
}

}  // namespace

void fill(Tensor& t, double value) {
  switch (t.dtype()) {
    case DType::Float32: fill_typed<float>(t, static_cast<float>(value)); break;
    case DType::Int64: fill_typed<int64_t>(t, static_cast<int64_t>(value)); break;
    case DType::UInt8: fill_typed<uint8_t>(t, static_cast<uint8_t>(value)); break;
    default: MT_FAIL("fill: no CUDA kernel for ", dtype_name(t.dtype()));
  }
}

void copy(const Tensor& src, Tensor& dst) {
  MT_CHECK(src.dtype() == dst.dtype(), "copy: dtype mismatch");
  if (dst.numel() == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                  cudaMemcpyDeviceToDevice, nullptr));
    return;
  }
  switch (element_size(dst.dtype())) {
    case 1: copy_typed<uint8_t>(src, dst); break;
    case 2: copy_typed<uint16_t>(src, dst); break;
    case 4: copy_typed<uint32_t>(src, dst); break;
    case 8: copy_typed<uint64_t>(src, dst); break;
  }
}

void convert(const Tensor& src, Tensor& dst) {
  if (src.numel() == 0) return;
  switch (src.dtype()) {
    case DType::Float32: convert_from<float>(src, dst); break;
    case DType::Int64: convert_from<int64_t>(src, dst); break;
    case DType::UInt8: convert_from<uint8_t>(src, dst); break;
    default: MT_FAIL("to(): no CUDA conversion from ", dtype_name(src.dtype()));
  }
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  if (a.is_contiguous() && b.is_contiguous() && a.shape() == out.shape() && b.shape() == out.shape()) {
    launch(binary_contiguous, blocks_for(n), op, pa, pb, po, n);
    return;
  }
  // Broadcast as on the CPU: each input gets the output's rank, stride 0 where it broadcasts.
  // The output is contiguous, so its offset is the linear index itself.
  const int64_t nd = out.dim();
  Shape sa(nd, 0), sb(nd, 0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t da = d - (nd - a.dim()), db = d - (nd - b.dim());
    if (da >= 0 && a.shape()[da] != 1) sa[d] = a.strides()[da];
    if (db >= 0 && b.shape()[db] != 1) sb[d] = b.strides()[db];
  }
  const Shape* st[2] = {&sa, &sb};
  launch(binary_broadcast, blocks_for(n), op, pa, pb, po, n, make_indexer<2>(out.shape(), st));
}

void binary_scalar(BinaryOp op, const Tensor& a, float s, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch(binary_scalar_kernel, blocks_for(n), op, a.data<float>(), s, out.data<float>(), n);
}

void unary(UnaryOp op, const Tensor& x, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch(unary_kernel, blocks_for(n), op, x.data<float>(), out.data<float>(), n);
}

void pow_scalar(const Tensor& x, float p, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  launch(pow_kernel, blocks_for(n), x.data<float>(), p, out.data<float>(), n);
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  Tensor xc = x.is_contiguous() ? x : x.contiguous();
  launch(axpy_kernel, blocks_for(n), alpha, xc.data<float>(), y.data<float>(), n);
}

void scale(Tensor& y, float factor) {
  const int64_t n = y.numel();
  if (n == 0) return;
  launch(scale_kernel, blocks_for(n), y.data<float>(), factor, n);
}

}  // namespace mt::core::cuda
