#include "data/device_staging.h"

#include "core/error.h"

#ifdef MT_WITH_CUDA
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_memory.h"
#endif

namespace mt::data {

#ifdef MT_WITH_CUDA

namespace {
// A copy of one batch takes milliseconds; a minute means the device is stuck.
constexpr auto kCopyTimeout = std::chrono::seconds(60);
}  // namespace

bool DeviceStaging::available() { return true; }

DeviceStaging::DeviceStaging(core::Device device) : device_(device) {
  MT_CHECK(device.is_cuda(), "DeviceStaging: ", device.str(), " is not a CUDA device");
  MT_CUDA_CHECK(cudaSetDevice(device.index));
  cudaStream_t s = nullptr;
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));  // see the header
  stream_ = s;
}

DeviceStaging::~DeviceStaging() {
  // No throwing from a destructor: errors here could only mean the context is already gone.
  // The buffers may still be read by the last copy: wait for it (bounded) before freeing them.
  try {
    wait_for_last_copy();
  } catch (const std::exception&) {
  }
  if (inputs_) cudaFreeHost(inputs_);
  if (targets_) cudaFreeHost(targets_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void DeviceStaging::wait_for_last_copy() {
  if (!last_copy_) return;
  auto event = static_cast<cudaEvent_t>(last_copy_.get());
  const auto deadline = std::chrono::steady_clock::now() + kCopyTimeout;
  cudaError_t e = cudaEventQuery(event);
  while (e == cudaErrorNotReady) {
    MT_CHECK(std::chrono::steady_clock::now() < deadline, "data loader: the copy of the previous batch to ",
             device_.str(), " did not finish within ", kCopyTimeout.count(), " s; the GPU is stuck or "
             "was taken by another process (check nvidia-smi)");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    e = cudaEventQuery(event);
  }
  MT_CHECK(e == cudaSuccess, "data loader: the copy of a batch to ", device_.str(), " failed: ", cudaGetErrorString(e));
  last_copy_.reset();
}

void* DeviceStaging::grow(void*& buffer, size_t& capacity, size_t bytes) {
  // Pinned memory belongs to the calling thread's current device's context: select ours
  // first, or a loader thread (whose current device starts at 0) makes a context on GPU 0.
  MT_CUDA_CHECK(cudaSetDevice(device_.index));
  wait_for_last_copy();  // the buffer is about to be written (or freed)
  if (bytes > capacity) {
    if (buffer) MT_CUDA_CHECK(cudaFreeHost(buffer));
    buffer = nullptr;
    capacity = 0;
    MT_CUDA_CHECK(cudaHostAlloc(&buffer, bytes, cudaHostAllocDefault));
    capacity = bytes;
  }
  return buffer;
}

float* DeviceStaging::host_inputs(int64_t n) {
  return static_cast<float*>(grow(inputs_, inputs_bytes_, sizeof(float) * size_t(n)));
}

int64_t* DeviceStaging::host_targets(int64_t n) {
  return static_cast<int64_t*>(grow(targets_, targets_bytes_, sizeof(int64_t) * size_t(n)));
}

DeviceStaging::Uploaded DeviceStaging::upload(const core::Shape& input_shape) {
  MT_CUDA_CHECK(cudaSetDevice(device_.index));  // the current device is per host thread
  auto stream = static_cast<cudaStream_t>(stream_);
  Uploaded out;
  {
    // Blocks of the copy stream: never memory that kernels queued on the compute stream still use.
    core::cuda::AllocationStream for_the_copy(stream_);
    out.inputs = core::Tensor::empty(input_shape, core::DType::Float32, device_);
    out.targets = core::Tensor::empty({input_shape.at(0)}, core::DType::Int64, device_);
  }
  MT_CHECK(out.inputs.nbytes() <= inputs_bytes_ && out.targets.nbytes() <= targets_bytes_,
           "DeviceStaging: upload of more than was staged");
  MT_CUDA_CHECK(cudaMemcpyAsync(out.inputs.raw_data(), inputs_, out.inputs.nbytes(), cudaMemcpyHostToDevice, stream));
  MT_CUDA_CHECK(cudaMemcpyAsync(out.targets.raw_data(), targets_, out.targets.nbytes(), cudaMemcpyHostToDevice, stream));
  cudaEvent_t done = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  out.done = std::shared_ptr<void>(done, [](void* e) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  MT_CUDA_CHECK(cudaEventRecord(done, stream));
  // The trainer's kernels (the legacy default stream) read them: their blocks wait for those
  // kernels when freed.
  core::cuda::record_stream(out.inputs, nullptr);
  core::cuda::record_stream(out.targets, nullptr);
  last_copy_ = out.done;
  return out;
}

void DeviceStaging::consumer_wait(const std::shared_ptr<void>& done, core::Device device) {
  if (!done) return;
  MT_CUDA_CHECK(cudaSetDevice(device.index));
  MT_CUDA_CHECK(cudaStreamWaitEvent(nullptr, static_cast<cudaEvent_t>(done.get()), 0));
}

#else  // no CUDA: nothing to stage for; the loader only builds one for a CUDA device

bool DeviceStaging::available() { return false; }

DeviceStaging::DeviceStaging(core::Device device) : device_(device) {
  MT_FAIL("data loader: cannot deliver batches to ", device.str(),
          ": this mintrain was built without CUDA; use device \"cpu\" or a GPU build");
}
DeviceStaging::~DeviceStaging() = default;
void* DeviceStaging::grow(void*&, size_t&, size_t) { return nullptr; }
void DeviceStaging::wait_for_last_copy() {}
float* DeviceStaging::host_inputs(int64_t) { return nullptr; }
int64_t* DeviceStaging::host_targets(int64_t) { return nullptr; }
DeviceStaging::Uploaded DeviceStaging::upload(const core::Shape&) { return {}; }
void DeviceStaging::consumer_wait(const std::shared_ptr<void>&, core::Device) {}

#endif

}  // namespace mt::data
