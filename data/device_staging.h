// Page-locked staging buffers and a copy stream for one loader thread, used when training on a
// GPU: the thread decodes a batch straight into pinned host memory, then copies it to the
// device with cudaMemcpyAsync on its own stream. Pinned memory is what the GPU's copy engine
// can read directly (from pageable memory the driver first copies through a bounce buffer, at
// a fraction of the bandwidth, and the copy blocks the calling thread), and doing the copy on
// the loader's thread takes it off the trainer's critical path: the batch the trainer takes
// from next() is already on the device, and `batch.inputs.to(device)` is a no-op.
//
// The thread waits for its own copy to finish before handing the batch over and reusing the
// buffer, so the buffer needs no further synchronization. The stream is a blocking one
// (cudaStreamCreate), ordered with the legacy default stream the kernels run on: our caching
// allocator is not stream-aware, so device memory a finished batch gave back may still be read
// by queued kernels, and the copy into it must wait for them. (A stream-aware allocator would
// let the copy overlap those kernels as well; the transfer of a 256 x 3 x 224 x 224 batch is a
// few milliseconds next to a ResNet-50 step of hundreds.)
//
// In a build without CUDA the constructor fails with an Error that says so; CPU training never
// creates one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/device.h"
#include "core/tensor.h"

namespace mt::data {

class DeviceStaging {
 public:
  explicit DeviceStaging(core::Device device);  // a CUDA device
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Pinned buffers of at least n elements, valid until the next call; grown, never shrunk.
  float* host_inputs(int64_t n);
  int64_t* host_targets(int64_t n);
  // Copies the staged inputs (input_shape, float32) and targets ([input_shape[0]], int64) into
  // new tensors on the device; returns once the copy has finished.
  std::pair<core::Tensor, core::Tensor> upload(const core::Shape& input_shape);
  // True in builds with CUDA support (whether or not a GPU is visible).
  static bool available();

 private:
  void* grow(void*& buffer, size_t& capacity, size_t bytes);

  core::Device device_;
  void* stream_ = nullptr;  // cudaStream_t, opaque so that this header needs no CUDA headers
  void* inputs_ = nullptr;
  void* targets_ = nullptr;
  size_t inputs_bytes_ = 0, targets_bytes_ = 0;
};

}  // namespace mt::data
