// Softmax, log-softmax and the classification losses on the GPU, with the CPU's arithmetic:
// the maximum is subtracted first, exponentials are summed in double, and the loss is the mean
// of per-row terms summed in double.
//
// Softmax works on "lines" as on the CPU: x viewed as [outer, n, inner], each of the
// outer * inner lines holds n elements `inner` apart. One warp per line.
//
// The losses check their labels on the device: a label outside [0, classes) is not read from
// (no out-of-bounds access) and is recorded; the record is read at the next copy to the host
// (core/cuda/index_checks.h), not in the forward pass, and gives the Error the CPU op would.
#include <cuda_runtime.h>

#include <limits>

#include "core/cuda/index_checks.h"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/softmax_loss.h"

namespace mt::core::cuda {

namespace {

struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  __host__ __device__ int64_t count() const { return outer * inner; }
  __host__ __device__ int64_t base(int64_t line) const {
    return inner == 1 ? line * n : (line / inner) * n * inner + line % inner;
  }
};

Lines lines(const Tensor& x, int64_t dim) {
  return {outer_size(x.shape(), dim), x.shape()[dim], inner_size(x.shape(), dim)};
}

__global__ void softmax_forward_kernel(const float* x, float* y, Lines L, bool log) {
  const int lane = threadIdx.x % kWarp;
  const int64_t st = L.inner;
  for (int64_t line = first_warp(); line < L.count(); line += warp_stride()) {
    const float* in = x + L.base(line);
    float* out = y + L.base(line);
    float mx = -INFINITY;
    for (int64_t k = lane; k < L.n; k += kWarp) mx = fmaxf(mx, in[k * st]);
    mx = warp_max(mx);
    double sum = 0.0;
    for (int64_t k = lane; k < L.n; k += kWarp) sum += expf(in[k * st] - mx);
    sum = warp_sum(sum);
    if (log) {
      const float lse = mx + static_cast<float>(::log(sum));
      for (int64_t k = lane; k < L.n; k += kWarp) out[k * st] = in[k * st] - lse;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = lane; k < L.n; k += kWarp) out[k * st] = expf(in[k * st] - mx) * inv;
    }
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* gy, float* gx, Lines L, bool log) {
  const int lane = threadIdx.x % kWarp;
  const int64_t st = L.inner;
  for (int64_t line = first_warp(); line < L.count(); line += warp_stride()) {
    const int64_t b = L.base(line);
    const float *yl = y + b, *gl = gy + b;
    float* out = gx + b;
    double dot = 0.0;  // softmax: sum(gy * y); log_softmax: sum(gy)
    for (int64_t k = lane; k < L.n; k += kWarp) dot += log ? gl[k * st] : gl[k * st] * yl[k * st];
    const float d = static_cast<float>(warp_sum(dot));
    for (int64_t k = lane; k < L.n; k += kWarp)
      out[k * st] = log ? gl[k * st] - expf(yl[k * st]) * d : yl[k * st] * (gl[k * st] - d);
  }
}

// ---- label checking

__device__ inline bool label_ok(int64_t t, int64_t k, int64_t i, int64_t n, IndexCheck check) {
  if (t >= 0 && t < k) return true;
  check.report(i, n);
  return false;
}

IndexCheck check_labels(const char* op, const Tensor& targets, int64_t k) {
  return defer_index_check(targets, [op = std::string(op), k](int64_t label, int64_t pos) {
    return op + ": label " + std::to_string(label) + " at position " + std::to_string(pos) +
           " is out of range for " + std::to_string(k) + " classes (valid labels are 0.." + std::to_string(k - 1) +
           "); check the dataset's labels against the model's number of classes";
  });
}

// ---- losses

// terms[i] = -log_probs[i, t[i]] (0 for a bad label, which is reported instead).
__global__ void nll_terms(const float* lp, const int64_t* t, double* terms, int64_t n, int64_t k,
                          IndexCheck bad) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    terms[i] = label_ok(t[i], k, i, n, bad) ? -static_cast<double>(lp[i * k + t[i]]) : 0.0;
}

// A warp per row: lse[i] = max + log(sum exp(x - max)); terms[i] = lse[i] - x[i, t[i]].
__global__ void cross_entropy_rows(const float* x, const int64_t* t, float* lse, double* terms, int64_t n,
                                   int64_t k, IndexCheck bad) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t i = first_warp(); i < n; i += warp_stride()) {
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
      terms[i] = label_ok(t[i], k, i, n, bad) ? static_cast<double>(l) - row[t[i]] : 0.0;
    }
  }
}

// loss = sum(terms) / n, one block, in double.
__global__ void mean_of_terms(const double* terms, int64_t n, float* loss) {
  __shared__ double shared[kWarp];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += terms[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(acc / static_cast<double>(n));
}

__global__ void nll_backward_kernel(const float* gloss, const int64_t* t, float* gx, int64_t n, int64_t k) {
  const float g = -gloss[0] / static_cast<float>(n);
  for (int64_t e = first_index(); e < n * k; e += grid_stride()) gx[e] = t[e / k] == e % k ? g : 0.0f;
}

__global__ void cross_entropy_backward_kernel(const float* x, const int64_t* t, const float* lse,
                                              const float* gloss, float* gx, int64_t n, int64_t k) {
  const float g = gloss[0] / static_cast<float>(n);
  for (int64_t e = first_index(); e < n * k; e += grid_stride()) {
    const int64_t i = e / k;
    float v = expf(x[e] - lse[i]) * g;
    if (t[i] == e % k) v -= g;
    gx[e] = v;
  }
}

}  // namespace

void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& y) {
  const Lines L = lines(x, dim);
  if (L.count() == 0 || L.n == 0) return;
  launch(softmax_forward_kernel, warp_blocks(L.count()), x.data<float>(), y.data<float>(), L, log);
}

void softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log, Tensor& gx) {
  const Lines L = lines(y, dim);
  if (L.count() == 0 || L.n == 0) return;
  launch(softmax_backward_kernel, warp_blocks(L.count()), y.data<float>(), gy.data<float>(),
         gx.data<float>(), L, log);
}

void nll_loss_forward(const Tensor& log_probs, const Tensor& targets, Tensor& loss) {
  const int64_t n = log_probs.shape()[0], k = log_probs.shape()[1];
  Tensor terms = Tensor::empty({n * 2}, DType::Float32, log_probs.device());  // n doubles
  const IndexCheck pbad = check_labels("nll_loss", targets, k);
  launch(nll_terms, blocks_for(n), log_probs.data<float>(), targets.data<int64_t>(),
         static_cast<double*>(terms.raw_data()), n, k, pbad);
  mean_of_terms<<<1, 1024>>>(static_cast<const double*>(terms.raw_data()), n, loss.data<float>());
  MT_CUDA_LAUNCH_CHECK();
}

void nll_loss_backward(const Tensor& gloss, const Tensor& targets, Tensor& gx) {
  const int64_t n = gx.shape()[0], k = gx.shape()[1];
  if (n * k == 0) return;
  launch(nll_backward_kernel, blocks_for(n * k), gloss.data<float>(), targets.data<int64_t>(),
         gx.data<float>(), n, k);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  Tensor terms = Tensor::empty({n * 2}, DType::Float32, logits.device());  // n doubles
  const IndexCheck pbad = check_labels("cross_entropy", targets, k);
  launch(cross_entropy_rows, warp_blocks(n), logits.data<float>(), targets.data<int64_t>(),
         lse.data<float>(), static_cast<double*>(terms.raw_data()),
         n, k, pbad);
  mean_of_terms<<<1, 1024>>>(static_cast<const double*>(terms.raw_data()), n, loss.data<float>());
  MT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& gloss, Tensor& gx) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  if (n * k == 0) return;
  launch(cross_entropy_backward_kernel, blocks_for(n * k), logits.data<float>(), targets.data<int64_t>(),
         lse.data<float>(), gloss.data<float>(),
         gx.data<float>(), n, k);
}

}  // namespace mt::core::cuda
