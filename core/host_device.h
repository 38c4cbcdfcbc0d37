// MT_HOST_DEVICE marks small functions that both the CPU and CUDA kernels call (Philox, the
// uniform conversion), so that the two devices compute them from one definition and agree bit
// for bit. Under a plain C++ compiler the macro is empty.
#pragma once

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
