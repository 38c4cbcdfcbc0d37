#include "core/allocator.h"

#include <cstdlib>

#include "core/error.h"
#include "core/storage.h"

namespace mt::core {

#ifdef MT_WITH_CUDA
Allocator& cuda_caching_allocator(int device);  // core/cuda/caching_allocator.cpp
#endif

namespace {
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    MT_CHECK(p != nullptr, "out of CPU memory: could not allocate ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

// The allocator for a device; throws when the device type is not built in.
Allocator& allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
#ifdef MT_WITH_CUDA
  return cuda_caching_allocator(device.index);  // each GPU its own pool, allocating there
#else
  MT_FAIL("this mintrain was built without CUDA; use device \"cpu\" or rebuild where the CUDA "
          "toolkit is installed");
#endif
}
}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device).allocate(nbytes);
}

Storage::~Storage() {
  if (data_) allocator_for(device_).deallocate(data_, nbytes_);
}

}  // namespace mt::core
