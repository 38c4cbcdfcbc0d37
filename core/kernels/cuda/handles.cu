// Library handles and the process-wide numeric switches (math_mode.h).
#include <atomic>
#include <unordered_map>

#include "core/cuda/cuda_check.h"
#include "core/kernels/cuda/handles.h"
#include "core/kernels/cuda/math_mode.h"

namespace mt::core::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
std::atomic<size_t> g_conv_workspace_limit{size_t(1) << 30};
std::atomic<bool> g_conv_benchmark{false};
std::atomic<bool> g_use_cudnn{true};

int current_device() {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
void set_conv_workspace_limit(size_t bytes) { g_conv_workspace_limit = bytes; }
size_t conv_workspace_limit() { return g_conv_workspace_limit; }
void set_conv_benchmark(bool on) { g_conv_benchmark = on; }
bool conv_benchmark() { return g_conv_benchmark; }
void set_use_cudnn(bool on) { g_use_cudnn = on; }
bool use_cudnn() { return g_use_cudnn && built_with_cudnn(); }
bool built_with_cudnn() {
#ifdef MT_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

cublasHandle_t cublas_handle() {
  thread_local std::unordered_map<int, cublasHandle_t> handles;  // by device
  const int dev = current_device();
  cublasHandle_t& h = handles[dev];
  if (!h) {
    MT_CUBLAS_CHECK(cublasCreate(&h));
    MT_CUBLAS_CHECK(cublasSetStream(h, nullptr));
  }
  // Set on every use (a host-side field write) so that set_allow_tf32 takes effect at once.
  // CUBLAS_DEFAULT_MATH never uses TF32 for cublasSgemm (short of NVIDIA_TF32_OVERRIDE).
  MT_CUBLAS_CHECK(cublasSetMathMode(h, g_allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return h;
}

#ifdef MT_WITH_CUDNN
cudnnHandle_t cudnn_handle() {
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  const int dev = current_device();
  cudnnHandle_t& h = handles[dev];
  if (!h) {
    MT_CUDNN_CHECK(cudnnCreate(&h));
    MT_CUDNN_CHECK(cudnnSetStream(h, nullptr));
  }
  return h;
}
#endif

}  // namespace mt::core::cuda
