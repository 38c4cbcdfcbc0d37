// Marks in a device's queue of work, and the time between them. On a GPU a mark is a CUDA event
// recorded on the stream the kernels run on, so the time between two marks is the time the
// kernels queued between them took, not the host's time to launch them (which returns long
// before they run). On the CPU a mark is the host clock: its kernels have run when the call that
// launched them returns. MG-WFBP profiles each layer's backward time this way.
#pragma once
#include <chrono>
#include <vector>

#include "core/device.h"

namespace mt::core {

class DeviceMarks {
 public:
  explicit DeviceMarks(Device device);
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;

  void clear();  // forgets the marks (their events are reused)
  void mark();   // a mark at the current end of the device's queue
  size_t size() const { return count_; }
  // Seconds between consecutive marks (size() - 1 values). On a GPU this waits until the device
  // has reached the last mark.
  std::vector<double> intervals();

 private:
  Device device_;
  size_t count_ = 0;
  std::vector<std::chrono::steady_clock::time_point> host_;  // the CPU's marks
  std::vector<void*> events_;                                 // the GPU's (cudaEvent_t), reused
};

}  // namespace mt::core
