#include "core/device.h"

#include <dlfcn.h>

#include <cstdlib>

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

std::string cuda_unavailable_reason() {
#ifdef MT_WITH_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return "";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string mask = visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : "";
  if (e == cudaSuccess || e == cudaErrorNoDevice) return "no CUDA device is visible" + mask;
  if (e == cudaErrorInsufficientDriver) {
    // The runtime says the same when there is no driver at all: look for the driver library.
    void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver is installed (libcuda.so.1 not found): no GPU here";
    ::dlclose(driver);
  }
  return std::string("a CUDA device is present but cannot be used: ") + cudaGetErrorString(e) + " (" +
         cudaGetErrorName(e) + ")" + mask;
#else
  return "this build has no CUDA support";
#endif
}

int local_rank_from_env() {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    MT_CHECK(*end == '\0' && r >= 0 && r < 1 << 20, name, "=\"", v, "\" is not a local rank (a number >= 0); ",
             "it is set by the launcher (mintrain launch, torchrun, srun, mpirun)");
    return static_cast<int>(r);
  }
  return -1;
}

Device resolve_device(const std::string& spec, int local_rank, int visible_devices) {
  const Device d = Device::parse(spec);
  if (!d.is_cuda() || spec != "cuda" || local_rank < 0) return d;
  MT_CHECK(local_rank < visible_devices, "device \"cuda\" means this rank's own GPU, but local rank ",
           local_rank, " needs at least ", local_rank + 1, " visible CUDA devices and ", visible_devices,
           " are visible; start at most ", visible_devices, " processes per node (--nproc-per-node ",
           visible_devices, "), or check CUDA_VISIBLE_DEVICES");
  return Device::cuda(local_rank);
}

void select_device(const Device& device) {
  if (device.is_cpu()) return;
#ifdef MT_WITH_CUDA
  const cudaError_t e = cudaSetDevice(device.index);
  MT_CHECK(e == cudaSuccess, "cannot select ", device.str(), ": ", cudaGetErrorString(e), " (",
           cuda_device_count(), " CUDA device(s) visible; check nvidia-smi and CUDA_VISIBLE_DEVICES)");
#else
  MT_FAIL("cannot select ", device.str(), ": this build has no CUDA support; use device \"cpu\"");
#endif
}

}  // namespace mt::core
