// Kernel dispatch by device. Every op computes through kernels named the same in
// mt::core::cpu (core/kernels/cpu/) and mt::core::cuda (core/kernels/cuda/):
//   MT_DISPATCH(x.device(), relu_forward, x, y);
// Until the CUDA kernels are built (MT_CUDA_KERNELS), an op on a CUDA tensor fails clearly.
// Each call is a ProfileScope named after the kernel (core/op_profile.h; one load when off):
// the temporary lives to the end of the full expression, so it spans the kernel call.
#pragma once

#include "core/error.h"
#include "core/op_profile.h"

namespace mt::core::detail {
[[noreturn]] inline void no_cuda_kernel(const char* kernel) {
  MT_FAIL("kernel '", kernel, "' has no CUDA version in this build; move the tensor to the CPU "
          "(device: \"cpu\") or build mintrain with its CUDA kernels");
}
}  // namespace mt::core::detail

#ifdef MT_CUDA_KERNELS
#define MT_DISPATCH(device, kernel, ...)           \
  (::mt::core::ProfileScope(#kernel),               \
   (device).is_cuda() ? ::mt::core::cuda::kernel(__VA_ARGS__) : ::mt::core::cpu::kernel(__VA_ARGS__))
#else
#define MT_DISPATCH(device, kernel, ...)                                                \
  (::mt::core::ProfileScope(#kernel),                                                   \
   (device).is_cuda() ? (::mt::core::detail::no_cuda_kernel(#kernel), ::mt::core::cpu::kernel(__VA_ARGS__)) \
                      : ::mt::core::cpu::kernel(__VA_ARGS__))
#endif
