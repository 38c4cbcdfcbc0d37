// cuBLAS and cuDNN handles, one per (host thread, device), created on first use and kept for
// the life of the process (few threads run kernels; destroying handles during process exit can
// race the driver's own teardown). Both libraries run on the default stream like our kernels.
// CUDA sources only.
#pragma once
#include <cublas_v2.h>

#include "core/error.h"

#ifdef MT_WITH_CUDNN
#include <cudnn.h>
#endif

#define MT_CUBLAS_CHECK(expr)                                                        \
  do {                                                                               \
    cublasStatus_t mt_st_ = (expr);                                                  \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      MT_FAIL("cuBLAS error in ", #expr, ": ", cublasGetStatusString(mt_st_));       \
  } while (0)

#ifdef MT_WITH_CUDNN
#define MT_CUDNN_CHECK(expr)                                                         \
  do {                                                                               \
    cudnnStatus_t mt_st_ = (expr);                                                   \
    if (mt_st_ != CUDNN_STATUS_SUCCESS)                                              \
      MT_FAIL("cuDNN error in ", #expr, ": ", cudnnGetErrorString(mt_st_));          \
  } while (0)
#endif

namespace mt::core::cuda {

// The calling thread's handle for the current device, with the math mode (TF32 or not) of
// math_mode.h applied.
cublasHandle_t cublas_handle();
#ifdef MT_WITH_CUDNN
cudnnHandle_t cudnn_handle();
#endif

}  // namespace mt::core::cuda
