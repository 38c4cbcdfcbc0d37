// Host <-> device copies and the device allocator's statistics (CUDA builds only).
#pragma once
#include <cstddef>

#include "core/tensor.h"

namespace mt::core::cuda {

// Copies a contiguous tensor to another contiguous tensor of the same shape and dtype on any
// pair of devices (CPU->CUDA, CUDA->CPU, CUDA->CUDA). Synchronous for now.
void copy_between_devices(const Tensor& src, Tensor& dst);

struct AllocatorStats {
  size_t current_bytes = 0;  // handed out to tensors
  size_t peak_bytes = 0;
  size_t cached_bytes = 0;   // freed by tensors, kept for reuse
  size_t device_allocations = 0;  // cudaMalloc calls so far
};
// Of the current device's pool (core/block_pool.h).
AllocatorStats allocator_stats();
void empty_cache();  // returns the current device's wholly free segments to the driver

}  // namespace mt::core::cuda
