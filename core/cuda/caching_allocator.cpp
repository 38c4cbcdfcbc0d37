// The CUDA caching allocator: one BlockPool (core/block_pool.h: best fit, splitting, merging,
// per-stream reuse) per GPU, with cudaMalloc/cudaFree behind it. Each pool allocates on its own
// device (a device guard around cudaMalloc), so a tensor labelled cuda:1 lives on GPU 1 whatever
// device the calling thread had selected.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/block_pool.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_memory.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/index_checks.h"
#include "core/strings.h"

namespace mt::core {

namespace {

using cuda::DeviceGuard;

std::string mib(size_t bytes) { return formatted("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// The stream this thread allocates for (AllocationStream); 0, the legacy default stream where
// the kernels run, unless a guard says otherwise.
thread_local uintptr_t t_allocation_stream = 0;

// Events for blocks used on other streams (BlockPool::record_stream): recorded on that stream
// at the free, polled at the next allocation.
BlockPool::StreamEvents cuda_stream_events() {
  // No throwing: a free runs in a destructor. An event that cannot be made means the device
  // has failed already (the next kernel launch reports it); the block is then simply freed.
  return {[](uintptr_t stream) -> void* {
            cudaEvent_t e = nullptr;
            if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
            if (cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)) != cudaSuccess) {
              (void)cudaEventDestroy(e);
              return nullptr;
            }
            return e;
          },
          [](void* e) {
            if (e == nullptr) return true;
            const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
            if (r == cudaErrorNotReady) return false;
            (void)cudaGetLastError();
            return true;  // done, or the device failed (the next kernel launch reports that)
          },
          [](void* e) {
            if (e != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
          }};
}

class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device)
      : device_(device),
        pool_(
            [this](size_t bytes) -> void* {
              void* p = nullptr;
              const cudaError_t err = cudaMalloc(&p, bytes);
              if (err == cudaSuccess) return p;
              (void)cudaGetLastError();
              if (err != cudaErrorMemoryAllocation) {
                MT_FAIL("CUDA error allocating ", bytes, " bytes on cuda:", device_, ": ", cudaGetErrorString(err),
                        " (is the GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)");
              }
              return nullptr;
            },
            [](void* segment) { (void)cudaFree(segment); }, cuda_stream_events()) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    const size_t cached = pool_.stats().cached_bytes;
    void* p = pool_.allocate(nbytes, t_allocation_stream);
    if (p == nullptr) fail_out_of_memory(BlockPool::round_size(nbytes), cached);
    return p;
  }

  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);  // a block used on other streams records events on this GPU
    pool_.deallocate(ptr);
  }

  void record_stream(void* ptr, uintptr_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);  // the events are made on this pool's GPU
    pool_.record_stream(ptr, stream);
  }

  BlockPoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return pool_.stats();
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    pool_.release_cached();
  }

 private:
  // What a user needs to act on an out-of-memory error: how much was asked, what the device
  // had, what this process holds, and the usual ways out.
  [[noreturn]] void fail_out_of_memory(size_t size, size_t cached_before_retry) {
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    (void)cudaGetLastError();
    MT_FAIL("CUDA out of memory: asked for ", mib(size), " on cuda:", device_, "; ", mib(free_b), " free of ",
            mib(total_b), "; cached by mintrain: ", mib(cached_before_retry),
            " (returned to the driver before retrying), held by its tensors: ", mib(pool_.stats().current_bytes),
            ". To fit: lower data.batch_size (and raise dist.grad_accumulation_steps to keep the global batch), "
            "use a smaller model, or check with nvidia-smi that no other process holds this GPU");
  }

  int device_;
  std::mutex mu_;
  BlockPool pool_;
};

// One allocator per device, made on first use; never destroyed (tensors may outlive statics).
CudaDeviceAllocator& instance(int device) {
  static std::mutex mu;
  static auto* allocators = new std::vector<std::unique_ptr<CudaDeviceAllocator>>();
  MT_CHECK(device >= 0, "internal: CUDA device index ", device);
  std::lock_guard<std::mutex> lock(mu);
  if (allocators->size() <= static_cast<size_t>(device)) allocators->resize(device + 1);
  auto& a = (*allocators)[device];
  if (!a) a = std::make_unique<CudaDeviceAllocator>(device);
  return *a;
}

int current_device() {
  int device = 0;
  (void)cudaGetDevice(&device);
  return device;
}

}  // namespace

Allocator& cuda_caching_allocator(int device) { return instance(device); }

namespace cuda {
AllocatorStats allocator_stats() {
  const BlockPoolStats s = instance(current_device()).stats();
  return {s.current_bytes, s.peak_bytes, s.cached_bytes, s.device_allocations};
}
void empty_cache() { instance(current_device()).empty_cache(); }

AllocationStream::AllocationStream(void* stream) : previous_(reinterpret_cast<void*>(t_allocation_stream)) {
  t_allocation_stream = reinterpret_cast<uintptr_t>(stream);
}
AllocationStream::~AllocationStream() { t_allocation_stream = reinterpret_cast<uintptr_t>(previous_); }

void record_stream(const Tensor& t, void* stream) {
  if (!t.defined() || !t.is_cuda() || !t.storage() || t.storage()->data() == nullptr) return;
  instance(t.device().index).record_stream(t.storage()->data(), reinterpret_cast<uintptr_t>(stream));
}

void copy_between_devices(const Tensor& src, Tensor& dst) {
  MT_CHECK(src.is_contiguous() && dst.is_contiguous() && src.nbytes() == dst.nbytes(),
           "internal: device copy needs contiguous tensors of equal size");
  if (src.nbytes() == 0) return;
  cudaMemcpyKind kind = src.is_cuda() ? (dst.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                      : cudaMemcpyHostToDevice;
  MT_CUDA_CHECK(cudaMemcpy(dst.raw_data(), src.raw_data(), src.nbytes(), kind));
  // The device's queue has drained for this copy: the place to read the deferred label checks.
  if (kind == cudaMemcpyDeviceToHost) read_index_checks(src.device().index);
}
}  // namespace cuda

}  // namespace mt::core
