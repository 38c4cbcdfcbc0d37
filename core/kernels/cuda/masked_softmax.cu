// The attention softmax with a key padding mask on the GPU, one warp per row of keys, with the
// CPU's arithmetic (maximum subtracted first, exponentials summed in double).
#include <cuda_runtime.h>

#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/masked_softmax.h"

namespace mt::core::cuda {

namespace {

// mask (may be null) is [B, sk]; row i of the scores belongs to batch i / rows_per_batch.
__global__ void masked_softmax_forward_kernel(const float* x, const float* mask, float* y, int64_t rows,
                                              int64_t sk, int64_t rows_per_batch, float scale) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < rows; i += warp_stride()) {
    const float* in = x + i * sk;
    const float* m = mask ? mask + (i / rows_per_batch) * sk : nullptr;
    float* out = y + i * sk;
    float mx = -INFINITY;
    for (int64_t k = lane; k < sk; k += kWarp)
      if (!m || m[k] != 0.0f) mx = fmaxf(mx, in[k] * scale);
    mx = warp_max(mx);  // the same in every lane, so the branch below is warp-uniform
    if (mx == -INFINITY) {
      for (int64_t k = lane; k < sk; k += kWarp) out[k] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t k = lane; k < sk; k += kWarp) {
      const float e = (!m || m[k] != 0.0f) ? expf(in[k] * scale - mx) : 0.0f;
      out[k] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / warp_sum(sum));
    for (int64_t k = lane; k < sk; k += kWarp) out[k] *= inv;  // each lane rescales what it wrote
  }
}

__global__ void masked_softmax_backward_kernel(const float* y, const float* gy, float* gx, int64_t rows,
                                               int64_t sk, float scale) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < rows; i += warp_stride()) {
    const float *yl = y + i * sk, *gl = gy + i * sk;
    float* out = gx + i * sk;
    double dot = 0.0;
    for (int64_t k = lane; k < sk; k += kWarp) dot += static_cast<double>(gl[k]) * yl[k];
    const float d = static_cast<float>(warp_sum(dot));
    for (int64_t k = lane; k < sk; k += kWarp) out[k] = scale * yl[k] * (gl[k] - d);
  }
}

}  // namespace

void masked_softmax_forward(const Tensor& scores, const Tensor& key_mask, float scale, Tensor& y) {
  const int64_t sk = scores.shape()[3];
  const int64_t rows = sk > 0 ? scores.numel() / sk : 0;
  if (rows == 0) return;
  const int64_t rows_per_batch = scores.shape()[1] * scores.shape()[2];
  launch(masked_softmax_forward_kernel, warp_blocks(rows),
      scores.data<float>(), key_mask.defined() ? key_mask.data<float>() : nullptr, y.data<float>(), rows, sk,
      rows_per_batch, scale);
}

void masked_softmax_backward(const Tensor& y, const Tensor& gy, float scale, Tensor& gx) {
  const int64_t sk = y.shape()[3];
  const int64_t rows = sk > 0 ? y.numel() / sk : 0;
  if (rows == 0) return;
  launch(masked_softmax_backward_kernel, warp_blocks(rows), y.data<float>(), gy.data<float>(),
         gx.data<float>(), rows, sk, scale);
}

}  // namespace mt::core::cuda
