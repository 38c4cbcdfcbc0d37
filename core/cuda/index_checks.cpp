#include "core/cuda/index_checks.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_guard.h"

namespace mt::core::cuda {
namespace {

constexpr size_t kMaxQueued = 4096;

struct Queued {
  Tensor indices;
  DescribeBadIndex describe;
};

struct DeviceChecks {
  unsigned long long* record = nullptr;  // cudaMalloc'd once, never freed (process lifetime)
  std::vector<Queued> queued;            // id = position here
};

std::mutex& checks_mutex() {
  static std::mutex m;
  return m;
}

std::map<int, DeviceChecks>& checks() {
  static auto* all = new std::map<int, DeviceChecks>();  // never destroyed: tensors outlive statics
  return *all;
}

}  // namespace

IndexCheck defer_index_check(const Tensor& indices, DescribeBadIndex describe) {
  MT_CHECK(indices.is_cuda() && indices.dtype() == DType::Int64, "internal: index check of ", indices.str());
  MT_CHECK(indices.numel() < (int64_t{1} << 32), "index check: ", indices.numel(), " indices in one tensor; "
           "at most 2^32 - 1 are supported");
  const int device = indices.device().index;
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(checks_mutex());
    full = checks()[device].queued.size() >= kMaxQueued;
  }
  if (full) read_index_checks(device);
  std::lock_guard<std::mutex> lock(checks_mutex());
  DeviceChecks& d = checks()[device];
  if (d.record == nullptr) {
    DeviceGuard on(device);
    MT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d.record), sizeof(unsigned long long)));
    MT_CUDA_CHECK(cudaMemset(d.record, 0, sizeof(unsigned long long)));
  }
  d.queued.push_back({indices, std::move(describe)});
  return {d.record, static_cast<uint32_t>(d.queued.size() - 1)};
}

void read_index_checks(int device) {
  std::vector<Queued> queued;
  unsigned long long key = 0;
  {
    std::lock_guard<std::mutex> lock(checks_mutex());
    auto it = checks().find(device);
    if (it == checks().end() || it->second.queued.empty()) return;
    DeviceChecks& d = it->second;
    DeviceGuard on(device);
    // Ordered after every kernel queued so far (the legacy default stream): all checks have run.
    MT_CUDA_CHECK(cudaMemcpy(&key, d.record, sizeof(key), cudaMemcpyDeviceToHost));
    if (key != 0) MT_CUDA_CHECK(cudaMemset(d.record, 0, sizeof(key)));
    queued.swap(d.queued);
  }
  if (key == 0) return;
  const size_t id = 0xffffffffu - static_cast<uint32_t>(key >> 32);
  MT_CHECK(id < queued.size(), "internal: index check record names check ", id, " of ", queued.size());
  const Queued& q = queued[id];
  const int64_t position = q.indices.numel() - static_cast<int64_t>(key & 0xffffffffu);
  int64_t value = 0;
  {
    DeviceGuard on(device);
    MT_CUDA_CHECK(cudaMemcpy(&value, q.indices.data<int64_t>() + position, sizeof(value), cudaMemcpyDeviceToHost));
  }
  MT_FAIL(q.describe(value, position));
}

}  // namespace mt::core::cuda
