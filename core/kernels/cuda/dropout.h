// CUDA twins of kernels/cpu/dropout.h. Element i uses word i % 4 of Philox block
// (counter + i / 4) under `seed`, through the same philox.h functions as the CPU, so the mask
// is identical bit for bit on both devices.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mt::core::cuda {
void dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t counter,
                     Tensor& y, Tensor& mask);
void dropout_backward(const Tensor& gy, const Tensor& mask, float scale, Tensor& gx);
}  // namespace mt::core::cuda
