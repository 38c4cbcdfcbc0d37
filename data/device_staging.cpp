#include "data/device_staging.h"

#include "core/error.h"

#ifdef MT_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#endif

namespace mt::data {

#ifdef MT_WITH_CUDA

bool DeviceStaging::available() { return true; }

DeviceStaging::DeviceStaging(core::Device device) : device_(device) {
  MT_CHECK(device.is_cuda(), "DeviceStaging: ", device.str(), " is not a CUDA device");
  MT_CUDA_CHECK(cudaSetDevice(device.index));
  cudaStream_t s = nullptr;
  MT_CUDA_CHECK(cudaStreamCreate(&s));  // blocking: see the header
  stream_ = s;
}

DeviceStaging::~DeviceStaging() {
  // No throwing from a destructor: errors here could only mean the context is already gone.
  if (inputs_) cudaFreeHost(inputs_);
  if (targets_) cudaFreeHost(targets_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void* DeviceStaging::grow(void*& buffer, size_t& capacity, size_t bytes) {
  if (bytes > capacity) {
    // Pinned memory belongs to the calling thread's current device's context: select ours
    // first, or a loader thread (whose current device starts at 0) makes a context on GPU 0.
    MT_CUDA_CHECK(cudaSetDevice(device_.index));
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

std::pair<core::Tensor, core::Tensor> DeviceStaging::upload(const core::Shape& input_shape) {
  MT_CUDA_CHECK(cudaSetDevice(device_.index));  // the current device is per host thread
  core::Tensor x = core::Tensor::empty(input_shape, core::DType::Float32, device_);
  core::Tensor y = core::Tensor::empty({input_shape.at(0)}, core::DType::Int64, device_);
  auto stream = static_cast<cudaStream_t>(stream_);
  MT_CHECK(x.nbytes() <= inputs_bytes_ && y.nbytes() <= targets_bytes_,
           "DeviceStaging: upload of more than was staged");
  MT_CUDA_CHECK(cudaMemcpyAsync(x.raw_data(), inputs_, x.nbytes(), cudaMemcpyHostToDevice, stream));
  MT_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), targets_, y.nbytes(), cudaMemcpyHostToDevice, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {x, y};
}

#else  // no CUDA: nothing to stage for; the loader only builds one for a CUDA device

bool DeviceStaging::available() { return false; }

DeviceStaging::DeviceStaging(core::Device device) : device_(device) {
  MT_FAIL("data loader: cannot deliver batches to ", device.str(),
          ": this mintrain was built without CUDA; use device \"cpu\" or a GPU build");
}
DeviceStaging::~DeviceStaging() = default;
void* DeviceStaging::grow(void*&, size_t&, size_t) { return nullptr; }
float* DeviceStaging::host_inputs(int64_t) { return nullptr; }
int64_t* DeviceStaging::host_targets(int64_t) { return nullptr; }
std::pair<core::Tensor, core::Tensor> DeviceStaging::upload(const core::Shape&) { return {}; }

#endif

}  // namespace mt::data
