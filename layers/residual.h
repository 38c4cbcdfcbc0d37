// What the residual blocks (BasicBlock, Bottleneck) share: the bias-free "same"-padded
// convolution that precedes each batch norm, and the projection shortcut used when a block
// changes the resolution or the channel count.
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/conv2d.h"
#include "layers/sequential.h"

namespace mt::layers {

// kernel x kernel convolution with padding kernel / 2 and no bias: batch norm follows and has
// its own shift.
Conv2dLayerOptions conv_before_batch_norm(int64_t in_channels, int64_t out_channels,
                                          int64_t kernel, int64_t stride);

// 1x1 convolution (with `stride`) + batch norm mapping the block's input onto its output, or
// nullptr when the identity already fits (same channels, stride 1).
std::shared_ptr<Sequential> projection_shortcut(int64_t in_channels, int64_t out_channels,
                                                int64_t stride, core::Generator& gen);

}  // namespace mt::layers
