// Selects a GPU for the calling host thread while in scope, and restores the one it had. The
// current device is per thread in CUDA, and kernels, streams, events and communicators are made
// on it: code that may run on another thread than the trainer's (a loader thread, a
// communication queue) selects the device it works for first.
#pragma once
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"

namespace mt::core::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    (void)cudaGetDevice(&previous_);
    changed_ = previous_ != device;
    if (changed_) MT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace mt::core::cuda
