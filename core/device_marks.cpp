#include "core/device_marks.h"

#include "core/error.h"

#ifdef MT_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#endif

namespace mt::core {

DeviceMarks::DeviceMarks(Device device) : device_(device) {
#ifndef MT_WITH_CUDA
  MT_CHECK(device.is_cpu(), "DeviceMarks on ", device.str(), ": this build has no CUDA support");
#endif
}

DeviceMarks::~DeviceMarks() {
#ifdef MT_WITH_CUDA
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

void DeviceMarks::clear() {
  count_ = 0;
  host_.clear();
}

void DeviceMarks::mark() {
  if (device_.is_cpu()) {
    host_.push_back(std::chrono::steady_clock::now());
    ++count_;
    return;
  }
#ifdef MT_WITH_CUDA
  if (count_ == events_.size()) {
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  // The legacy default stream: the one our kernels run on (core/README.md).
  MT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[count_]), nullptr));
  ++count_;
#endif
}

std::vector<double> DeviceMarks::intervals() {
  std::vector<double> out;
  if (count_ < 2) return out;
  if (device_.is_cpu()) {
    for (size_t k = 1; k < count_; ++k) out.push_back(std::chrono::duration<double>(host_[k] - host_[k - 1]).count());
    return out;
  }
#ifdef MT_WITH_CUDA
  MT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[count_ - 1])));
  for (size_t k = 1; k < count_; ++k) {
    float ms = 0.0f;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_[k - 1]),
                                       static_cast<cudaEvent_t>(events_[k])));
    out.push_back(ms * 1e-3);
  }
#endif
  return out;
}

}  // namespace mt::core
