#include "core/kernels/cpu/softmax_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cpu/vector_math.h"

namespace mt::core::cpu {

namespace {

constexpr int64_t kParallelElems = 1 << 15;

// x viewed as [outer, n, inner] around dimension `dim`: each of the outer * inner lines has n
// elements `inner` apart (inner == 1 for the usual last dimension: contiguous rows).
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t count() const { return outer * inner; }
  int64_t base(int64_t line) const {  // offset of the first element of a line
    return inner == 1 ? line * n : (line / inner) * n * inner + line % inner;
  }
};

Lines lines(const Tensor& x, int64_t dim) {
  return {outer_size(x.shape(), dim), x.shape()[dim], inner_size(x.shape(), dim)};
}

}  // namespace

void softmax_forward(const Tensor& x, int64_t dim, bool log, Tensor& y) {
  const Lines L = lines(x, dim);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const int64_t st = L.inner;
#pragma omp parallel for schedule(static) if (x.numel() > kParallelElems)
  for (int64_t line = 0; line < L.count(); ++line) {
    const float* in = px + L.base(line);
    float* out = py + L.base(line);
    // Subtract the maximum first: exp of large logits would overflow.
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < L.n; ++k) mx = std::max(mx, in[k * st]);
    double sum = 0.0;
    for (int64_t k = 0; k < L.n; ++k) {
      const float e = std::exp(in[k * st] - mx);
      if (!log) out[k * st] = e;
      sum += e;
    }
    if (log) {
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t k = 0; k < L.n; ++k) out[k * st] = in[k * st] - lse;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < L.n; ++k) out[k * st] *= inv;
    }
  }
}

void softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log, Tensor& gx) {
  const Lines L = lines(y, dim);
  const float* py = y.data<float>();
  const float* pg = gy.data<float>();
  float* po = gx.data<float>();
  const int64_t st = L.inner;
#pragma omp parallel for schedule(static) if (y.numel() > kParallelElems)
  for (int64_t line = 0; line < L.count(); ++line) {
    const int64_t b = L.base(line);
    const float *yl = py + b, *gl = pg + b;
    float* out = po + b;
    double dot = 0.0;  // softmax: sum(gy * y); log_softmax: sum(gy)
    for (int64_t k = 0; k < L.n; ++k) dot += log ? gl[k * st] : gl[k * st] * yl[k * st];
    const float d = static_cast<float>(dot);
    if (log) {
      for (int64_t k = 0; k < L.n; ++k) out[k * st] = gl[k * st] - std::exp(yl[k * st]) * d;
    } else {
      for (int64_t k = 0; k < L.n; ++k) out[k * st] = yl[k * st] * (gl[k * st] - d);
    }
  }
}

void nll_loss_forward(const Tensor& log_probs, const Tensor& targets, Tensor& loss) {
  const int64_t n = log_probs.shape()[0], k = log_probs.shape()[1];
  const float* lp = log_probs.data<float>();
  const int64_t* t = targets.data<int64_t>();
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum -= lp[i * k + t[i]];
  loss.data<float>()[0] = static_cast<float>(sum / static_cast<double>(n));
}

void nll_loss_backward(const Tensor& gloss, const Tensor& targets, Tensor& gx) {
  const int64_t n = gx.shape()[0], k = gx.shape()[1];
  const int64_t* t = targets.data<int64_t>();
  float* out = gx.data<float>();
  std::fill(out, out + n * k, 0.0f);
  const float g = -gloss.data<float>()[0] / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) out[i * k + t[i]] = g;
}

MT_VECTOR_CLONES void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  const float* px = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  float* pl = lse.data<float>();
  // Per-row losses summed afterwards in row order: an OpenMP reduction would add the partial
  // sums in an unspecified order and make the loss differ in its last bits from run to run.
  std::vector<double> row_loss(n);
#pragma omp parallel for schedule(static) if (n * k > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = px + i * k;
    pl[i] = row_log_sum_exp(row, k);
    row_loss[i] = static_cast<double>(pl[i]) - row[t[i]];  // -log_softmax at the target
  }
  double total = 0.0;
  for (double l : row_loss) total += l;
  loss.data<float>()[0] = static_cast<float>(total / static_cast<double>(n));
}

MT_VECTOR_CLONES void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                             const Tensor& gloss, Tensor& gx) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  const float* px = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  const float* pl = lse.data<float>();
  float* out = gx.data<float>();
  const float g = gloss.data<float>()[0] / static_cast<float>(n);
#pragma omp parallel for schedule(static) if (n * k > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    row_softmax_times(px + i * k, k, pl[i], g, out + i * k);
    out[i * k + t[i]] -= g;
  }
}

}  // namespace mt::core::cpu
