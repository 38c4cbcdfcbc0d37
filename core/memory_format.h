// Memory formats of 4-d image tensors: NCHW (contiguous, the default) and channels-last (NHWC).
//
// A channels-last tensor keeps the logical shape [N, C, H, W], so every op indexes it as it
// indexes any other, but its strides are [H*W*C, 1, W*C, C]: the channels of a pixel sit side by
// side. oneDNN's fastest CPU convolutions read and write that order directly, so on the CPU
// conv2d returns channels-last tensors, and batch norm, ReLU, the add, max pooling and global
// average pooling keep their input's format: a CNN's activations then go from convolution to
// convolution without a reorder.
// Every other op sees a non-contiguous tensor and calls contiguous(), which copies it to NCHW:
// correct, only slower. The CUDA kernels know NCHW only, so on a GPU nothing is channels-last.
#pragma once
#include "core/tensor.h"

namespace mt::core {

// [H*W*C, 1, W*C, C] for the shape [N, C, H, W].
Shape channels_last_strides(const Shape& nchw);

// 4-d with channels-last strides (dimensions of size 1 may have any stride) and not contiguous:
// a tensor that is both (one channel, or 1x1 pixels) counts as contiguous, so that an op with
// two paths takes the plain one.
bool is_channels_last(const Tensor& t);

// On the CPU, channels-last: the ops that have channels-last kernels keep this format.
bool keeps_channels_last(const Tensor& t);

// The same shape, and both contiguous or both channels-last: element k of one lies at memory
// offset k of the other too, so an elementwise op runs one flat loop over both.
bool same_dense_order(const Tensor& a, const Tensor& b);

// A new uninitialised tensor of shape [N, C, H, W] in channels-last order.
Tensor empty_channels_last(const Shape& nchw, Device device = Device::cpu(), DType dtype = DType::Float32);

// A new uninitialised tensor, channels-last or contiguous as asked.
Tensor empty_in_format(const Shape& nchw, bool channels_last, Device device, DType dtype = DType::Float32);

// A new uninitialised float32 tensor shaped like `like`, channels-last when `like` is,
// contiguous otherwise.
Tensor empty_in_format_of(const Tensor& like);

// `t` itself when it is channels-last (contiguous, when `channels_last` is false), else a copy in
// that format. Not recorded by autograd: for backward formulas that bring an incoming gradient
// into the format of their output.
Tensor in_format(const Tensor& t, bool channels_last);
Tensor in_format_of(const Tensor& t, const Tensor& like);  // in the format of `like`

// A differentiable copy of a 4-d tensor in channels-last order (itself when it already is).
Tensor to_channels_last(const Tensor& x);

}  // namespace mt::core
