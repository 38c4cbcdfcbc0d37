// Host <-> device copies and the device allocator's statistics (CUDA builds only).
#pragma once
#include <cstddef>

#include "core/tensor.h"

namespace mt::core::cuda {

// Copies a contiguous tensor to another contiguous tensor of the same shape and dtype on any
// pair of devices (CPU->CUDA, CUDA->CPU, CUDA->CUDA). Synchronous for now.
void copy_between_devices(const Tensor& src, Tensor& dst);

// Streams and the caching allocator (core/block_pool.h). A block is reused only by the stream
// it was allocated for, and the kernels run on the legacy default stream (0). Code that queues
// work on another stream (the loader's copy stream) allocates for it while an AllocationStream
// lives, and marks tensors that other streams use with record_stream, so their blocks wait for
// that work before reuse. `stream` is a cudaStream_t (void* here: no CUDA header needed).
class AllocationStream {
 public:
  explicit AllocationStream(void* stream);  // this thread's allocations, until destroyed
  ~AllocationStream();
  AllocationStream(const AllocationStream&) = delete;
  AllocationStream& operator=(const AllocationStream&) = delete;

 private:
  void* previous_;
};
// `t`'s memory is also used by work queued on `stream` (PyTorch's record_stream): when the
// tensor is freed, its block returns to the pool once that stream's work queued by then is done.
void record_stream(const Tensor& t, void* stream);

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
