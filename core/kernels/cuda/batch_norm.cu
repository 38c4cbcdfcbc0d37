// Batch normalization with the CPU kernel's formulas (kernels/cpu/batch_norm.cpp). x is viewed
// as [n, c, s] (s = H*W, or 1 for [N, C]); channel ch owns the n runs x[(i*c + ch)*s .. +s).
//
// The per-channel sums (mean, variance, the two gradient sums) run over many blocks per channel
// (channel_reduce.cuh: slices summed in double, then added in a fixed order), so a layer with
// few channels still fills the GPU; an elementwise kernel then applies the per-channel result.
#include <cmath>

#include "core/kernels/cuda/batch_norm.h"
#include "core/kernels/cuda/channel_reduce.cuh"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/relu_rule.h"

namespace mt::core::cuda {

namespace {

using Layout = ChannelLayout;

Layout layout(const Tensor& x) {
  const int64_t s = x.dim() == 4 ? x.shape()[2] * x.shape()[3] : 1;
  return {x.shape()[0], x.shape()[1], s};
}

// The terms the passes sum, per element of a channel.
struct SumOf {
  const float* x;
  __device__ void operator()(int64_t, int64_t off, double* acc) const { acc[0] += x[off]; }
};
// Squared deviations from the mean rounded to float, as the CPU computes them.
struct SquaredDeviation {
  const float* x;
  const float* mean;
  __device__ void operator()(int64_t ch, int64_t off, double* acc) const {
    const float d = x[off] - mean[ch];
    acc[0] += d * d;
  }
};
// bn(x) = x * scale + shift with scale = w * invstd, shift = b - mean * scale (per channel).
// Forward and backward both compute it here, so the fused ReLU's mask in backward is the
// forward's exactly.
struct Affine {
  const float* weight;  // null: 1
  const float* bias;    // null: 0
  const float* mean;
  const float* invstd;
  __device__ float operator()(int64_t ch, float x) const {
    const float scale = (weight ? weight[ch] : 1.0f) * invstd[ch];
    const float shift = (bias ? bias[ch] : 0.0f) - mean[ch] * scale;
    return x * scale + shift;
  }
};

// The gradient reaching the norm: gy, or with the fused ReLU gy where bn(x) > 0 and 0 elsewhere.
struct GatedGradient {
  const float* x;
  const float* gy;
  Affine bn;
  bool relu;
  __device__ float operator()(int64_t ch, int64_t off) const {
    return relu ? relu_gate(gy[off], bn(ch, x[off])) : gy[off];
  }
};

// sum(gy) and sum(gy * (x - mean)).
struct GradientSums {
  GatedGradient g;
  __device__ void operator()(int64_t ch, int64_t off, double* acc) const {
    const float gy = g(ch, off);
    acc[0] += gy;
    acc[1] += gy * (g.x[off] - g.bn.mean[ch]);
  }
};

// One thread per channel: mean = sum / count, rounded to float for the deviations.
__global__ void bn_mean(const double* partial, int splits, Layout L, float* save_mean) {
  for (int64_t ch = first_index(); ch < L.c; ch += grid_stride())
    save_mean[ch] = static_cast<float>(sum_partials<1>(partial, ch, splits, 0) / static_cast<double>(L.count()));
}

// One thread per channel: the variance, the running statistics (training), save_invstd. The
// mean is taken again in double from the first pass, as the CPU keeps it.
__global__ void bn_finish_stats(const double* mean_partial, const double* sq_partial, int splits, Layout L,
                                bool training, float momentum, float eps, float* running_mean, float* running_var,
                                float* save_mean, float* save_invstd) {
  for (int64_t ch = first_index(); ch < L.c; ch += grid_stride()) {
    const double count = static_cast<double>(L.count());
    double mean, var;
    if (training) {
      mean = sum_partials<1>(mean_partial, ch, splits, 0) / count;
      const double sq = sum_partials<1>(sq_partial, ch, splits, 0);
      var = sq / count;  // biased: what normalization uses
      if (running_mean)
        running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * mean);
      if (running_var) {
        const double unbiased = sq / (count - 1.0);  // the op ensures count > 1
        running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * unbiased);
      }
    } else {
      mean = running_mean[ch];
      var = running_var[ch];
    }
    save_mean[ch] = static_cast<float>(mean);
    save_invstd[ch] = static_cast<float>(1.0 / sqrt(var + eps));
  }
}

// y = bn(x), or relu(bn(x)) with the fused ReLU.
__global__ void bn_apply(const float* x, float* y, Layout L, Affine bn, bool relu) {
  const int64_t total = L.n * L.c * L.s;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const float v = bn((i / L.s) % L.c, x[i]);
    y[i] = relu ? relu_value(v) : v;
  }
}

// One thread per channel, from the sums of gy and gy * (x - mean): gw, gb, and the two means
// the input gradient needs (coef[ch] = mean(gy), coef[c + ch] = mean(gy * xhat); zero in
// evaluation).
__global__ void bn_backward_finish(const double* partial, int splits, Layout L, const float* save_invstd,
                                   bool training, float* gw, float* gb, float* coef) {
  for (int64_t ch = first_index(); ch < L.c; ch += grid_stride()) {
    const double sum_g = sum_partials<2>(partial, ch, splits, 0);
    const double sum_gx = sum_partials<2>(partial, ch, splits, 1) * save_invstd[ch];
    if (gw) gw[ch] = static_cast<float>(sum_gx);
    if (gb) gb[ch] = static_cast<float>(sum_g);
    const double count = static_cast<double>(L.count());
    coef[ch] = training ? static_cast<float>(sum_g / count) : 0.0f;
    coef[L.c + ch] = training ? static_cast<float>(sum_gx / count) : 0.0f;
  }
}

// gx = k * (gy - mean(gy) - xhat * mean(gy * xhat)), k = w * invstd (evaluation: k * gy).
__global__ void bn_backward_apply(GatedGradient g, float* gx, Layout L, const float* coef) {
  const int64_t total = L.n * L.c * L.s;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t ch = (i / L.s) % L.c;
    const float invstd = g.bn.invstd[ch];
    const float k = (g.bn.weight ? g.bn.weight[ch] : 1.0f) * invstd;
    gx[i] = k * (g(ch, i) - coef[ch] - (g.x[i] - g.bn.mean[ch]) * invstd * coef[L.c + ch]);
  }
}

float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, bool relu, Tensor& y, Tensor& save_mean, Tensor& save_invstd) {
  const Layout L = layout(x);
  if (L.c == 0) return;
  const int splits = channel_splits(L);
  // Scratch for the slices' sums: c * splits doubles per pass (float32 storage, twice the count).
  Tensor scratch;
  double* mean_partial = nullptr;
  double* sq_partial = nullptr;
  if (training) {
    scratch = Tensor::empty({4 * L.c * splits}, DType::Float32, x.device());
    mean_partial = static_cast<double*>(scratch.raw_data());
    sq_partial = mean_partial + L.c * splits;
    launch_channel_partial_sums<1>(L, splits, SumOf{x.data<float>()}, mean_partial);
    launch(bn_mean, blocks_for(L.c), mean_partial, splits, L, save_mean.data<float>());
    launch_channel_partial_sums<1>(L, splits, SquaredDeviation{x.data<float>(), save_mean.data<float>()}, sq_partial);
  }
  launch(bn_finish_stats, blocks_for(L.c), mean_partial, sq_partial, splits, L, training, momentum, eps,
         ptr_or_null(running_mean), ptr_or_null(running_var),
         save_mean.data<float>(), save_invstd.data<float>());
  if (x.numel() == 0) return;
  const Affine bn{ptr_or_null(weight), ptr_or_null(bias), save_mean.data<float>(), save_invstd.data<float>()};
  launch(bn_apply, blocks_for(x.numel()), x.data<float>(), y.data<float>(), L, bn, relu);
}

void batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Tensor& save_mean, const Tensor& save_invstd, const Tensor& gy,
                         bool training, bool relu, Tensor& gx, Tensor& gw, Tensor& gb) {
  const Layout L = layout(x);
  if (L.c == 0) return;
  const Affine bn{ptr_or_null(weight), ptr_or_null(bias), save_mean.data<float>(), save_invstd.data<float>()};
  const GatedGradient g{x.data<float>(), gy.data<float>(), bn, relu};
  Tensor coef = Tensor::empty({2 * L.c}, DType::Float32, x.device());
  const int splits = channel_splits(L);
  Tensor scratch = Tensor::empty({4 * L.c * splits}, DType::Float32, x.device());  // c * splits * 2 doubles
  auto* partial = static_cast<double*>(scratch.raw_data());
  launch_channel_partial_sums<2>(L, splits, GradientSums{g}, partial);
  launch(bn_backward_finish, blocks_for(L.c), partial, splits, L, save_invstd.data<float>(), training,
         ptr_or_null(gw), ptr_or_null(gb), coef.data<float>());
  if (!gx.defined() || x.numel() == 0) return;
  launch(bn_backward_apply, blocks_for(x.numel()), g, gx.data<float>(), L, coef.data<float>());
}

}  // namespace mt::core::cuda
