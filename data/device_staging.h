// Page-locked staging buffers and a copy stream for one loader thread, used when training on a
// GPU: the thread decodes a batch straight into pinned host memory, then copies it to the
// device with cudaMemcpyAsync on its own stream. Pinned memory is what the GPU's copy engine
// can read directly (from pageable memory the driver first copies through a bounce buffer, at
// a fraction of the bandwidth, and the copy blocks the calling thread), and doing the copy on
// the loader's thread takes it off the trainer's critical path.
//
// The copy stream is non-blocking: the copy starts at once, beside the kernels the trainer has
// queued, instead of behind all of them. What keeps that safe:
//   - the batch's tensors are allocated for the copy stream (core::cuda::AllocationStream), so
//     their blocks cannot be memory that compute kernels still read, and recorded as used by the
//     compute stream (core::cuda::record_stream), so when the trainer frees them their blocks
//     wait for the kernels that read them before the next upload can take them;
//   - an event recorded after the copy travels with the batch, and the loader's next() makes
//     the compute stream wait for it (consumer_wait), so no kernel reads a half-copied batch;
//   - the pinned buffers are written again only once the previous copy from them has finished
//     (host_inputs/host_targets wait for it, with a timeout).
// Every call selects the loader's device first: a loader thread starts on GPU 0, and pinned
// memory, streams and events belong to the device current when they are made.
//
// In a build without CUDA the constructor fails with an Error that says so; CPU training never
// creates one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/tensor.h"

namespace mt::data {

class DeviceStaging {
 public:
  explicit DeviceStaging(core::Device device);  // a CUDA device
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Pinned buffers of at least n elements, valid until the next upload; grown, never shrunk.
  // They wait for the previous upload's copy to finish first.
  float* host_inputs(int64_t n);
  int64_t* host_targets(int64_t n);
  struct Uploaded {
    core::Tensor inputs, targets;
    std::shared_ptr<void> done;  // the copy's event (cudaEvent_t): pass it to consumer_wait
  };
  // Queues the copy of the staged inputs (input_shape, float32) and targets ([input_shape[0]],
  // int64) into new device tensors on the copy stream, and returns without waiting for it.
  Uploaded upload(const core::Shape& input_shape);
  // On the thread that will use the batch: its kernels (the compute stream) wait for `done`.
  // Queues a wait on the device; the host does not block.
  static void consumer_wait(const std::shared_ptr<void>& done, core::Device device);
  // True in builds with CUDA support (whether or not a GPU is visible).
  static bool available();

 private:
  void* grow(void*& buffer, size_t& capacity, size_t bytes);
  void wait_for_last_copy();  // before the pinned buffers are written again

  core::Device device_;
  void* stream_ = nullptr;  // cudaStream_t, opaque so that this header needs no CUDA headers
  void* inputs_ = nullptr;
  void* targets_ = nullptr;
  size_t inputs_bytes_ = 0, targets_bytes_ = 0;
  std::shared_ptr<void> last_copy_;  // the event after the last upload's copy
};

}  // namespace mt::data
