// Pooling over NCHW planes, one thread per output element (forward) or per input element
// (average-pool backward, gathered), written to compute exactly what the CPU loops compute.
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/pooling.h"

namespace mt::core::cuda {

namespace {

struct PoolGeometry {
  int64_t planes;  // N * C
  int64_t h, w, ho, wo;
  int64_t kernel, stride, pad;
};

PoolGeometry geometry(const Tensor& in, const Tensor& out, int64_t kernel, int64_t stride, int64_t pad) {
  return {in.shape()[0] * in.shape()[1], in.shape()[2], in.shape()[3], out.shape()[2],
          out.shape()[3], kernel, stride, pad};
}

// The window of output position o along one axis, clipped to the image: [lo, hi).
__device__ inline void window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size,
                              int64_t& lo, int64_t& hi) {
  const int64_t start = o * stride - pad;
  lo = start > 0 ? start : 0;
  hi = start + kernel < size ? start + kernel : size;
}

// Whether v replaces the current maximum m: strictly greater (the first maximum is kept), or
// NaN (a NaN wins and propagates) -- the CPU's rule.
__device__ inline bool beats(float v, float m) { return (v > m) | (v != v); }

__global__ void max_pool_forward(const float* x, float* y, int64_t* idx, PoolGeometry g) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / (g.ho * g.wo), oh = (i / g.wo) % g.ho, ow = i % g.wo;
    const float* in = x + p * g.h * g.w;
    int64_t h0, h1, w0, w1;
    window(oh, g.stride, g.pad, g.kernel, g.h, h0, h1);
    window(ow, g.stride, g.pad, g.kernel, g.w, w0, w1);
    // padding <= kernel / 2 (checked by the op), so every window holds an image pixel.
    int64_t best_i = h0 * g.w + w0;
    float best = in[best_i];
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const int64_t j = ih * g.w + iw;
        const float v = in[j];
        if (beats(v, best)) {
          best = v;
          best_i = j;
        }
      }
    y[i] = best;
    idx[i] = best_i;
  }
}

// Routes each output gradient to the pixel its maximum came from. Overlapping windows
// (stride < kernel) can send several to one pixel, hence the atomic add; the order of those few
// additions may vary between runs (in the last bit). Non-overlapping windows (LeNet's 2x2/2)
// give each pixel at most one contribution, so the result is exact.
__global__ void max_pool_backward(const float* gy, const int64_t* idx, float* gx, int64_t planes,
                                  int64_t in_plane, int64_t out_plane) {
  const int64_t total = planes * out_plane;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / out_plane;
    atomicAdd(gx + p * in_plane + idx[i], gy[i]);
  }
}

__global__ void avg_pool_forward(const float* x, float* y, PoolGeometry g) {
  const int64_t total = g.planes * g.ho * g.wo;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / (g.ho * g.wo), oh = (i / g.wo) % g.ho, ow = i % g.wo;
    const float* in = x + p * g.h * g.w;
    int64_t h0, h1, w0, w1;
    window(oh, g.stride, g.pad, g.kernel, g.h, h0, h1);
    window(ow, g.stride, g.pad, g.kernel, g.w, w0, w1);
    float s = 0.0f;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) s += in[ih * g.w + iw];
    y[i] = s / static_cast<float>((h1 - h0) * (w1 - w0));  // padding is not counted
  }
}

// Each input pixel gathers the shares of the windows that contain it, in the order the CPU
// loop scatters them (output rows, then columns), so the sums match bit for bit.
__global__ void avg_pool_backward(const float* gy, float* gx, PoolGeometry g) {
  const int64_t total = g.planes * g.h * g.w;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t p = i / (g.h * g.w), ih = (i / g.w) % g.h, iw = i % g.w;
    const float* grad = gy + p * g.ho * g.wo;
    // Output rows whose window [oh*s - pad, oh*s - pad + kernel) contains ih.
    const int64_t oh_lo = max(int64_t(0), (ih + g.pad - g.kernel + g.stride) / g.stride);
    const int64_t oh_hi = min(g.ho - 1, (ih + g.pad) / g.stride);
    const int64_t ow_lo = max(int64_t(0), (iw + g.pad - g.kernel + g.stride) / g.stride);
    const int64_t ow_hi = min(g.wo - 1, (iw + g.pad) / g.stride);
    float acc = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      int64_t h0, h1;
      window(oh, g.stride, g.pad, g.kernel, g.h, h0, h1);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        int64_t w0, w1;
        window(ow, g.stride, g.pad, g.kernel, g.w, w0, w1);
        if (iw < w0 || iw >= w1) continue;
        acc += grad[oh * g.wo + ow] / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    gx[i] = acc;
  }
}

// A warp per plane; the sum in float like the CPU's (whose vectorized order differs anyway).
__global__ void global_avg_forward(const float* x, float* y, int64_t planes, int64_t hw) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t p = first_warp(); p < planes; p += warp_stride()) {
    const float* in = x + p * hw;
    float s = 0.0f;
    for (int64_t j = lane; j < hw; j += kWarp) s += in[j];
    s = warp_sum(s);
    if (lane == 0) y[p] = s / static_cast<float>(hw);
  }
}

__global__ void global_avg_backward(const float* gy, float* gx, int64_t planes, int64_t hw) {
  for (int64_t i = first_index(); i < planes * hw; i += grid_stride())
    gx[i] = gy[i / hw] / static_cast<float>(hw);
}

}  // namespace

void max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding,
                        Tensor& y, Tensor& indices) {
  const PoolGeometry g = geometry(x, y, kernel, stride, padding);
  const int64_t total = y.numel();
  if (total == 0) return;
  launch(max_pool_forward, blocks_for(total), x.data<float>(), y.data<float>(),
         indices.data<int64_t>(), g);
}

void max_pool2d_backward(const Tensor& gy, const Tensor& indices, Tensor& gx) {
  const int64_t planes = gx.shape()[0] * gx.shape()[1];
  const int64_t in_plane = gx.shape()[2] * gx.shape()[3];
  const int64_t out_plane = gy.shape()[2] * gy.shape()[3];
  if (gx.numel() == 0) return;
  MT_CUDA_CHECK(cudaMemsetAsync(gx.raw_data(), 0, gx.nbytes(), nullptr));  // float 0 is all zero bits
  if (gy.numel() == 0) return;
  launch(max_pool_backward, blocks_for(gy.numel()), gy.data<float>(), indices.data<int64_t>(),
         gx.data<float>(), planes, in_plane, out_plane);
}

void avg_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Tensor& y) {
  const PoolGeometry g = geometry(x, y, kernel, stride, padding);
  if (y.numel() == 0) return;
  launch(avg_pool_forward, blocks_for(y.numel()), x.data<float>(), y.data<float>(), g);
}

void avg_pool2d_backward(const Tensor& gy, int64_t kernel, int64_t stride, int64_t padding, Tensor& gx) {
  const PoolGeometry g = geometry(gx, gy, kernel, stride, padding);
  if (gx.numel() == 0) return;
  launch(avg_pool_backward, blocks_for(gx.numel()), gy.data<float>(), gx.data<float>(), g);
}

void global_avg_pool2d_forward(const Tensor& x, Tensor& y) {
  const int64_t planes = x.shape()[0] * x.shape()[1], hw = x.shape()[2] * x.shape()[3];
  if (planes == 0) return;
  launch(global_avg_forward, warp_blocks(planes), x.data<float>(), y.data<float>(), planes, hw);
}

void global_avg_pool2d_backward(const Tensor& gy, Tensor& gx) {
  const int64_t planes = gx.shape()[0] * gx.shape()[1], hw = gx.shape()[2] * gx.shape()[3];
  if (planes * hw == 0) return;
  launch(global_avg_backward, blocks_for(planes * hw), gy.data<float>(), gx.data<float>(), planes, hw);
}

}  // namespace mt::core::cuda
