// Layer normalization on the GPU with the CPU's arithmetic: two-pass row statistics in double,
// one warp per row. The weight and bias gradients are column sums over all rows, done in two
// fixed-order stages (partial sums over chunks of rows, then over the chunks) so that they are
// deterministic and still spread over many threads when D is small next to N.
#include <cuda_runtime.h>

#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/layer_norm.h"

namespace mt::core::cuda {

namespace {

constexpr int64_t kRowsPerChunk = 32;

__global__ void layer_norm_forward_kernel(const float* x, const float* w, const float* b, float eps, float* y,
                                          float* mean, float* rstd, int64_t n, int64_t d) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < n; i += warp_stride()) {
    const float* row = x + i * d;
    double s = 0.0;
    for (int64_t j = lane; j < d; j += kWarp) s += row[j];
    const double mu = warp_sum(s) / static_cast<double>(d);
    double v = 0.0;
    for (int64_t j = lane; j < d; j += kWarp) {
      const double c = row[j] - mu;
      v += c * c;
    }
    v = warp_sum(v);
    const float m = static_cast<float>(mu);
    const float r = static_cast<float>(1.0 / ::sqrt(v / static_cast<double>(d) + eps));
    if (lane == 0) {
      mean[i] = m;
      rstd[i] = r;
    }
    float* out = y + i * d;
    for (int64_t j = lane; j < d; j += kWarp) out[j] = (row[j] - m) * r * w[j] + b[j];
  }
}

__global__ void layer_norm_input_grad(const float* x, const float* w, const float* mean, const float* rstd,
                                      const float* gy, float* gx, int64_t n, int64_t d) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < n; i += warp_stride()) {
    const float *row = x + i * d, *g = gy + i * d;
    const float m = mean[i], r = rstd[i];
    double a = 0.0, c = 0.0;  // sum(gxhat), sum(gxhat * xhat)
    for (int64_t j = lane; j < d; j += kWarp) {
      const double gh = static_cast<double>(g[j]) * w[j];
      a += gh;
      c += gh * ((row[j] - m) * r);
    }
    const float mean_g = static_cast<float>(warp_sum(a) / static_cast<double>(d));
    const float mean_gx = static_cast<float>(warp_sum(c) / static_cast<double>(d));
    float* out = gx + i * d;
    for (int64_t j = lane; j < d; j += kWarp) {
      const float xhat = (row[j] - m) * r;
      out[j] = r * (g[j] * w[j] - mean_g - xhat * mean_gx);
    }
  }
}

// Stage 1: for chunk k and column c, the sums over rows k*kRowsPerChunk .. of gy * xhat and gy.
__global__ void param_grad_partials(const float* x, const float* mean, const float* rstd, const float* gy,
                                    double* pw, double* pb, int64_t n, int64_t d, int64_t chunks) {
  for (int64_t e = first_index(); e < chunks * d; e += grid_stride()) {
    const int64_t k = e / d, c = e % d;
    const int64_t i1 = (k + 1) * kRowsPerChunk < n ? (k + 1) * kRowsPerChunk : n;
    double sw = 0.0, sb = 0.0;
    for (int64_t i = k * kRowsPerChunk; i < i1; ++i) {
      const float g = gy[i * d + c];
      sw += static_cast<double>(g) * ((x[i * d + c] - mean[i]) * rstd[i]);
      sb += g;
    }
    pw[e] = sw;
    pb[e] = sb;
  }
}

// Stage 2: column c sums its chunks in order.
__global__ void param_grad_totals(const double* pw, const double* pb, float* gw, float* gb, int64_t d,
                                  int64_t chunks) {
  for (int64_t c = first_index(); c < d; c += grid_stride()) {
    double sw = 0.0, sb = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      sw += pw[k * d + c];
      sb += pb[k * d + c];
    }
    if (gw) gw[c] = static_cast<float>(sw);
    if (gb) gb[c] = static_cast<float>(sb);
  }
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t d = x.shape()[x.dim() - 1], n = d > 0 ? x.numel() / d : 0;
  if (n == 0) return;
  launch(layer_norm_forward_kernel, warp_blocks(n), x.data<float>(), weight.data<float>(), bias.data<float>(),
         eps, y.data<float>(), mean.data<float>(),
         rstd.data<float>(), n, d);
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& gy, Tensor& gx, Tensor& gweight, Tensor& gbias) {
  const int64_t d = x.shape()[x.dim() - 1], n = d > 0 ? x.numel() / d : 0;
  if (gx.defined() && n > 0) {
    launch(layer_norm_input_grad, warp_blocks(n), x.data<float>(), weight.data<float>(), mean.data<float>(),
           rstd.data<float>(), gy.data<float>(), gx.data<float>(), n, d);
  }
  if ((!gweight.defined() && !gbias.defined()) || d == 0) return;
  const int64_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
  // Two arrays of chunks * d doubles (a float32 tensor of twice the length holds them).
  Tensor partials = Tensor::empty({std::max<int64_t>(chunks * d, 1) * 4}, DType::Float32, x.device());
  auto* pw = static_cast<double*>(partials.raw_data());
  double* pb = pw + chunks * d;
  if (chunks > 0) {
    launch(param_grad_partials, blocks_for(chunks * d), x.data<float>(), mean.data<float>(),
           rstd.data<float>(), gy.data<float>(), pw, pb, n, d,
           chunks);
  }
  launch(param_grad_totals, blocks_for(d), pw, pb, gweight.defined() ? gweight.data<float>() : nullptr,
         gbias.defined() ? gbias.data<float>() : nullptr, d, chunks);
}

}  // namespace mt::core::cuda
