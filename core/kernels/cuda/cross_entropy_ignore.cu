// Cross-entropy over the non-ignored rows on the GPU, with the CPU's arithmetic: a warp per
// counted row computes its log-sum-exp (maximum first, exponentials summed in double), one
// block sums the row terms and the count in double, and the mean divides by the count.
#include <cuda_runtime.h>

#include "core/kernels/cuda/cross_entropy_ignore.h"
#include "core/cuda/index_checks.h"
#include "core/kernels/cuda/launch.cuh"

namespace mt::core::cuda {

namespace {

// terms[i] = lse[i] - x[i, t[i]] for counted rows, 0 for ignored and bad ones; a bad target
// is reported (core/cuda/index_checks.h).
__global__ void counted_row_terms(const float* x, const int64_t* t, int64_t ignore_index, float* lse,
                                  double* terms, int64_t n, int64_t k, IndexCheck bad) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < n; i += warp_stride()) {
    const int64_t ti = t[i];
    if (ti == ignore_index || ti < 0 || ti >= k) {
      if (lane == 0) {
        if (ti != ignore_index) bad.report(i, n);
        lse[i] = 0.0f;
        terms[i] = 0.0;
      }
      continue;
    }
    const float* row = x + i * k;
    float mx = -INFINITY;
    for (int64_t j = lane; j < k; j += kWarp) mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t j = lane; j < k; j += kWarp) sum += expf(row[j] - mx);
    sum = warp_sum(sum);
    if (lane == 0) {
      const float l = mx + static_cast<float>(::log(sum));
      lse[i] = l;
      terms[i] = static_cast<double>(l) - row[ti];
    }
  }
}

// One block: loss = sum(terms) / count (0 without counted rows), count = counted rows.
__global__ void mean_over_counted(const double* terms, const int64_t* t, int64_t ignore_index, int64_t n,
                                  float* loss, float* count) {
  __shared__ double shared[kWarp];
  double acc = 0.0, cnt = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    acc += terms[i];
    cnt += t[i] != ignore_index ? 1.0 : 0.0;
  }
  acc = block_sum(acc, shared);
  cnt = block_sum(cnt, shared);
  if (threadIdx.x == 0) {
    loss[0] = cnt > 0.0 ? static_cast<float>(acc / cnt) : 0.0f;
    count[0] = static_cast<float>(cnt);
  }
}

__global__ void counted_rows_backward(const float* x, const int64_t* t, int64_t ignore_index, const float* lse,
                                      const float* count, const float* gloss, float* gx, int64_t n, int64_t k) {
  const float g = count[0] > 0.0f ? gloss[0] / count[0] : 0.0f;
  for (int64_t e = first_index(); e < n * k; e += grid_stride()) {
    const int64_t i = e / k, ti = t[i];
    if (ti == ignore_index) {
      gx[e] = 0.0f;
      continue;
    }
    float v = expf(x[e] - lse[i]) * g;
    if (ti == e % k) v -= g;
    gx[e] = v;
  }
}

}  // namespace

void cross_entropy_ignore_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                  Tensor& loss, Tensor& lse, Tensor& count) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  const Device dev = logits.device();
  Tensor terms = Tensor::empty({std::max<int64_t>(n, 1) * 2}, DType::Float32, dev);  // n doubles
  auto* pterms = static_cast<double*>(terms.raw_data());
  if (n > 0) {
    const IndexCheck bad = defer_index_check(targets, [k, ignore_index](int64_t target, int64_t pos) {
      return "cross_entropy_ignore: target " + std::to_string(target) + " at position " + std::to_string(pos) +
             " is out of range for " + std::to_string(k) + " classes (valid targets are 0.." + std::to_string(k - 1) +
             ", or " + std::to_string(ignore_index) + " to ignore the row); check the labels against the "
             "vocabulary size";
    });
    launch(counted_row_terms, warp_blocks(n), logits.data<float>(), targets.data<int64_t>(), ignore_index,
           lse.data<float>(), pterms, n, k,
           bad);
  }
  mean_over_counted<<<1, 1024>>>(pterms, targets.data<int64_t>(), ignore_index, n, loss.data<float>(),
                                 count.data<float>());
  MT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_ignore_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                   const Tensor& lse, const Tensor& count, const Tensor& gloss, Tensor& gx) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  if (n * k == 0) return;
  launch(counted_rows_backward, blocks_for(n * k), logits.data<float>(), targets.data<int64_t>(),
         ignore_index, lse.data<float>(), count.data<float>(),
         gloss.data<float>(), gx.data<float>(), n, k);
}

}  // namespace mt::core::cuda
