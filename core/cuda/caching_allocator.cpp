// A caching device allocator: freed blocks are kept in per-size free lists and reused, so the
// steady state of a training loop makes no cudaMalloc/cudaFree calls (both synchronize the
// device). Sizes are rounded to 512 bytes (small) or 2 MiB (large) to make reuse likely.
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_memory.h"

namespace mt::core {

namespace {

size_t round_size(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (n <= (size_t(1) << 20)) return (n + kSmall - 1) / kSmall * kSmall;
  return (n + kLarge - 1) / kLarge * kLarge;
}

class CudaCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    size_t cached_before_retry = 0;
    auto it = free_.lower_bound(size);
    // Reuse a cached block of the same size class (no more than twice the request, to bound waste).
    if (it != free_.end() && it->first <= 2 * size) {
      p = it->second;
      live_[p] = it->first;
      stats_.cached_bytes -= it->first;
      stats_.current_bytes += it->first;
      free_.erase(it);
    } else {
      cudaError_t err = cudaMalloc(&p, size);
      if (err != cudaSuccess && err != cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        MT_FAIL("CUDA error allocating ", size, " bytes: ", cudaGetErrorString(err),
                " (is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES)");
      }
      if (err != cudaSuccess) {
        // The cache may hold enough memory in blocks of other sizes: give it all back to the
        // driver and try once more before giving up.
        cached_before_retry = stats_.cached_bytes;
        release_cache_locked();
        (void)cudaGetLastError();
        err = cudaMalloc(&p, size);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        fail_out_of_memory(size, cached_before_retry);
      }
      ++stats_.device_allocations;
      live_[p] = size;
      stats_.current_bytes += size;
    }
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }

  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    stats_.current_bytes -= it->second;
    stats_.cached_bytes += it->second;
    free_.emplace(it->second, ptr);
    live_.erase(it);
  }

  cuda::AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

 private:
  // What a user needs to act on an out-of-memory error: how much was asked, what the device
  // had, what this process holds, and the usual ways out.
  [[noreturn]] void fail_out_of_memory(size_t size, size_t cached_before_retry) const {
    int device = -1;
    size_t free_b = 0, total_b = 0;
    (void)cudaGetDevice(&device);
    (void)cudaMemGetInfo(&free_b, &total_b);
    (void)cudaGetLastError();
    MT_FAIL("CUDA out of memory: asked for ", mib(size), " on cuda:", device, "; ", mib(free_b),
            " free of ", mib(total_b), "; cached by mintrain: ", mib(cached_before_retry),
            " (returned to the driver before retrying), held by its tensors: ",
            mib(stats_.current_bytes), ". To fit: lower data.batch_size "
            "(and raise dist.grad_accumulation_steps to keep the global batch), use a smaller "
            "model, or check with nvidia-smi that no other process holds this GPU");
  }
  static std::string mib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
  }

  void release_cache_locked() {
    for (auto& [size, p] : free_) cudaFree(p);
    free_.clear();
    stats_.cached_bytes = 0;
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;
  cuda::AllocatorStats stats_;
};

CudaCachingAllocator& instance() {
  static auto* a = new CudaCachingAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

}  // namespace

Allocator& cuda_caching_allocator() { return instance(); }

namespace cuda {
AllocatorStats allocator_stats() { return instance().stats(); }
void empty_cache() { instance().empty_cache(); }

void copy_between_devices(const Tensor& src, Tensor& dst) {
  MT_CHECK(src.is_contiguous() && dst.is_contiguous() && src.nbytes() == dst.nbytes(),
           "internal: device copy needs contiguous tensors of equal size");
  if (src.nbytes() == 0) return;
  cudaMemcpyKind kind = src.is_cuda() ? (dst.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                      : cudaMemcpyHostToDevice;
  MT_CUDA_CHECK(cudaMemcpy(dst.raw_data(), src.raw_data(), src.nbytes(), kind));
}
}  // namespace cuda

}  // namespace mt::core
