#include "core/device.h"

#include "core/error.h"

#ifdef MT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mt::core {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return cuda(idx);
    } catch (const std::exception&) {
    }
  }
  MT_FAIL("unknown device \"", s, "\": valid devices are \"cpu\", \"cuda\" and \"cuda:N\"");
}

int cuda_device_count() {
#ifdef MT_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace mt::core
