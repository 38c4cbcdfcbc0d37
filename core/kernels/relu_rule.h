// ReLU's rule, one definition for every kernel that applies it (the ReLU kernels and the fused
// ones in batch norm and the residual add, on the CPU and on CUDA), so they agree exactly.
#pragma once
#include "core/host_device.h"

namespace mt::core {
// max(v, 0) as a select the compiler vectorizes; NaN passes through.
MT_HOST_DEVICE inline float relu_value(float v) { return v < 0.0f ? 0.0f : v; }
// The gradient through a ReLU whose output was y: g where y > 0, else 0 (and 0 for NaN).
MT_HOST_DEVICE inline float relu_gate(float g, float y) { return y > 0.0f ? g : 0.0f; }
}  // namespace mt::core
