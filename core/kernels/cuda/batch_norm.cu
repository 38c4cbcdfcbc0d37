// Batch normalization with the CPU kernel's formulas (kernels/cpu/batch_norm.cpp). x is viewed
// as [n, c, s] (s = H*W, or 1 for [N, C]); channel ch owns the n runs x[(i*c + ch)*s .. +s).
//
// Each pass is two kernels: one block per channel reduces (sums in double, the CPU's mean and
// variance in two passes), then an elementwise kernel applies the per-channel result. A block
// per channel leaves most of a large GPU idle when there are few channels; splitting channels
// across blocks is the obvious tuning step, kept out of this first version for clarity.
#include <cmath>

#include "core/kernels/cuda/batch_norm.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {

struct Layout {
  int64_t n, c, s;
  __host__ __device__ int64_t count() const { return n * s; }
};

Layout layout(const Tensor& x) {
  const int64_t s = x.dim() == 4 ? x.shape()[2] * x.shape()[3] : 1;
  return {x.shape()[0], x.shape()[1], s};
}

constexpr int kStatThreads = 512;

// Element k (0 <= k < n*s) of channel ch.
__device__ inline int64_t channel_offset(Layout L, int64_t ch, int64_t k) {
  return ((k / L.s) * L.c + ch) * L.s + k % L.s;
}

// Batch statistics (training) or running statistics (evaluation) -> save_mean, save_invstd;
// in training also the running-statistics update.
__global__ void bn_stats(const float* x, Layout L, bool training, float momentum, float eps,
                         float* running_mean, float* running_var, float* save_mean, float* save_invstd) {
  __shared__ double shared[kWarp];
  const int64_t ch = blockIdx.x;
  const double count = static_cast<double>(L.count());
  double mean, var;
  if (training) {
    double sum = 0.0;
    for (int64_t k = threadIdx.x; k < L.count(); k += blockDim.x) sum += x[channel_offset(L, ch, k)];
    mean = block_sum(sum, shared) / count;
    // Squared deviations from the mean rounded to float, as the CPU computes them.
    const float m = static_cast<float>(mean);
    double sq = 0.0;
    for (int64_t k = threadIdx.x; k < L.count(); k += blockDim.x) {
      const float d = x[channel_offset(L, ch, k)] - m;
      sq += d * d;
    }
    sq = block_sum(sq, shared);
    var = sq / count;  // biased: what normalization uses
    if (threadIdx.x == 0) {
      if (running_mean)
        running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * mean);
      if (running_var) {
        const double unbiased = sq / (count - 1.0);  // the op ensures count > 1
        running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
      }
    }
  } else {
    mean = running_mean[ch];
    var = running_var[ch];
  }
  if (threadIdx.x == 0) {
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / sqrt(var + eps));
  }
}

// y = x * scale + shift with scale = w * invstd, shift = b - mean * scale (per channel).
__global__ void bn_apply(const float* x, float* y, Layout L, const float* weight, const float* bias,
                         const float* save_mean, const float* save_invstd) {
  const int64_t total = L.n * L.c * L.s;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t ch = (i / L.s) % L.c;
    const float scale = (weight ? weight[ch] : 1.0f) * save_invstd[ch];
    const float shift = (bias ? bias[ch] : 0.0f) - save_mean[ch] * scale;
    y[i] = x[i] * scale + shift;
  }
}

// sum(gy) and sum(gy * (x - mean)) * invstd per channel -> gw, gb, and the two means the input
// gradient needs (coef[ch] = mean(gy), coef[c + ch] = mean(gy * xhat); zero in evaluation).
__global__ void bn_backward_reduce(const float* x, const float* gy, Layout L, const float* save_mean,
                                   const float* save_invstd, bool training, float* gw, float* gb, float* coef) {
  __shared__ double shared[kWarp];
  const int64_t ch = blockIdx.x;
  const float mean = save_mean[ch], invstd = save_invstd[ch];
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t k = threadIdx.x; k < L.count(); k += blockDim.x) {
    const int64_t off = channel_offset(L, ch, k);
    sum_g += gy[off];
    sum_gx += gy[off] * (x[off] - mean);
  }
  sum_g = block_sum(sum_g, shared);
  sum_gx = block_sum(sum_gx, shared) * invstd;
  if (threadIdx.x == 0) {
    if (gw) gw[ch] = static_cast<float>(sum_gx);
    if (gb) gb[ch] = static_cast<float>(sum_g);
    const double count = static_cast<double>(L.count());
    coef[ch] = training ? static_cast<float>(sum_g / count) : 0.0f;
    coef[L.c + ch] = training ? static_cast<float>(sum_gx / count) : 0.0f;
  }
}

// gx = k * (gy - mean(gy) - xhat * mean(gy * xhat)), k = w * invstd (evaluation: k * gy).
__global__ void bn_backward_apply(const float* x, const float* gy, float* gx, Layout L, const float* weight,
                                  const float* save_mean, const float* save_invstd, const float* coef) {
  const int64_t total = L.n * L.c * L.s;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t ch = (i / L.s) % L.c;
    const float invstd = save_invstd[ch];
    const float k = (weight ? weight[ch] : 1.0f) * invstd;
    gx[i] = k * (gy[i] - coef[ch] - (x[i] - save_mean[ch]) * invstd * coef[L.c + ch]);
  }
}

float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  const Layout L = layout(x);
  if (L.c == 0) return;
  bn_stats<<<static_cast<unsigned>(L.c), kStatThreads>>>(x.data<float>(), L, training, momentum, eps,
                                                         ptr_or_null(running_mean), ptr_or_null(running_var),
                                                         save_mean.data<float>(), save_invstd.data<float>());
  MT_CUDA_LAUNCH_CHECK();
  if (x.numel() == 0) return;
  bn_apply<<<blocks_for(x.numel()), kThreads>>>(x.data<float>(), y.data<float>(), L, ptr_or_null(weight),
                                                ptr_or_null(bias), save_mean.data<float>(),
                                                save_invstd.data<float>());
  MT_CUDA_LAUNCH_CHECK();
}

void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                         const Tensor& save_invstd, const Tensor& gy, bool training, Tensor& gx,
                         Tensor& gw, Tensor& gb) {
  const Layout L = layout(x);
  if (L.c == 0) return;
  Tensor coef = Tensor::empty({2 * L.c}, DType::Float32, x.device());
  bn_backward_reduce<<<static_cast<unsigned>(L.c), kStatThreads>>>(
      x.data<float>(), gy.data<float>(), L, save_mean.data<float>(), save_invstd.data<float>(), training,
      ptr_or_null(gw), ptr_or_null(gb), coef.data<float>());
  MT_CUDA_LAUNCH_CHECK();
  if (!gx.defined() || x.numel() == 0) return;
  bn_backward_apply<<<blocks_for(x.numel()), kThreads>>>(x.data<float>(), gy.data<float>(), gx.data<float>(), L,
                                                         ptr_or_null(weight), save_mean.data<float>(),
                                                         save_invstd.data<float>(), coef.data<float>());
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace mt::core::cuda
