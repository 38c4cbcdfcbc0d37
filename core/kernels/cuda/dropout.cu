// Inverted dropout with the CPU's counter scheme: thread b draws Philox block (counter + b)
// and decides elements 4b .. 4b+3, exactly as iteration b of the CPU loop does.
#include "core/kernels/cuda/dropout.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/philox.h"

namespace mt::core::cuda {

namespace {
__global__ void dropout_forward_kernel(const float* x, float* y, uint8_t* mask, int64_t n, float p,
                                       float scale, uint64_t seed, uint64_t counter) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = first_index(); b < blocks; b += grid_stride()) {
    const PhiloxBlock r = philox_block(seed, counter + static_cast<uint64_t>(b));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i >= n) break;
      const bool keep = u32_to_unit(r.w[j]) >= p;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : 0.0f;
    }
  }
}

__global__ void dropout_backward_kernel(const float* gy, const uint8_t* mask, float scale, float* gx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = mask[i] ? gy[i] * scale : 0.0f;
}
}  // namespace

void dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t counter,
                     Tensor& y, Tensor& mask) {
  const int64_t n = x.numel();
  if (n == 0) return;
  launch(dropout_forward_kernel, blocks_for((n + 3) / 4), x.data<float>(), y.data<float>(),
         mask.data<uint8_t>(), n, p, scale, seed, counter);
}

void dropout_backward(const Tensor& gy, const Tensor& mask, float scale, Tensor& gx) {
  const int64_t n = gy.numel();
  if (n == 0) return;
  launch(dropout_backward_kernel, blocks_for(n), gy.data<float>(), mask.data<uint8_t>(), scale,
         gx.data<float>(), n);
}

}  // namespace mt::core::cuda
