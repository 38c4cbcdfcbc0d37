#include "core/synchronize.h"

#include "core/error.h"

#ifdef MT_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/index_checks.h"
#endif

namespace mt::core {

void synchronize(const Device& device) {
  if (device.is_cpu()) return;
#ifdef MT_WITH_CUDA
  int current = 0;
  MT_CHECK(cudaGetDevice(&current) == cudaSuccess, "synchronize(", device.str(), "): no usable CUDA device");
  // cudaDeviceSynchronize waits for the current device: select the one asked for, then restore.
  if (current != device.index) {
    MT_CHECK(cudaSetDevice(device.index) == cudaSuccess, "synchronize: cannot select ", device.str());
  }
  const cudaError_t status = cudaDeviceSynchronize();
  if (current != device.index) (void)cudaSetDevice(current);
  MT_CHECK(status == cudaSuccess, "waiting for ", device.str(), " failed: ", cudaGetErrorString(status),
           " (a kernel queued earlier failed; compute-sanitizer finds which)");
  cuda::read_index_checks(device.index);  // labels out of range since the last read
#else
  MT_FAIL("synchronize(", device.str(), "): this build has no CUDA support");
#endif
}

}  // namespace mt::core
