// CPU kernels for inverted dropout. Randomness is counter-based: element i uses word i % 4 of
// Philox block (counter + i / 4) under `seed`, so the mask depends only on (seed, counter) and
// not on how the work is split between threads (or between CPU and GPU kernels).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mt::core::cpu {
// Keeps element i when its uniform draw u >= p: y = x * scale, mask = 1; else y = 0, mask = 0.
void dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t counter,
                     Tensor& y, Tensor& mask);
// gx = gy * mask * scale (mask is uint8).
void dropout_backward(const Tensor& gy, const Tensor& mask, float scale, Tensor& gx);
}  // namespace mt::core::cpu
