// Memory allocators, one per device type. CPU memory is 64-byte aligned so SIMD loads and
// OpenBLAS never straddle cache lines. The CUDA caching allocator lives in core/cuda/.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace mt::core {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

constexpr size_t kCpuAlignment = 64;

}  // namespace mt::core
