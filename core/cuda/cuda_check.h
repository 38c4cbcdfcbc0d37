// Turns a failed CUDA runtime call into an mt::core::Error naming the call and the reason.
#pragma once
#include <cuda_runtime_api.h>

#include "core/error.h"

#define MT_CUDA_CHECK(expr)                                                                 \
  do {                                                                                      \
    cudaError_t mt_err_ = (expr);                                                           \
    if (mt_err_ != cudaSuccess)                                                             \
      MT_FAIL("CUDA error in ", #expr, ": ", cudaGetErrorString(mt_err_));                 \
  } while (0)
