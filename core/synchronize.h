// Waiting for a device to finish its queued work.
//
// CUDA kernels and copies run asynchronously: a clock read right after launching them measures
// the launches, not the work. Benchmarks call synchronize() before each clock read that ends a
// timed span. CPU kernels are synchronous, so there it returns at once.
#pragma once
#include "core/device.h"

namespace mt::core {

// Blocks until every kernel and copy queued on `device` has finished. An error the device
// reports (a failed kernel) is an Error naming the device.
void synchronize(const Device& device);

}  // namespace mt::core
