#include "core/kernels/cpu/cross_entropy_ignore.h"

#include <algorithm>
#include <vector>

#include "core/kernels/cpu/vector_clones.h"
#include "core/kernels/cpu/vector_math.h"

namespace mt::core::cpu {

namespace {
constexpr int64_t kParallelElems = 1 << 15;
}  // namespace

MT_VECTOR_CLONES void cross_entropy_ignore_forward(const Tensor& logits, const Tensor& targets,
                                                   int64_t ignore_index, Tensor& loss, Tensor& lse, Tensor& count) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  const float* px = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  float* pl = lse.data<float>();
  // Per-row terms summed afterwards in row order, so the loss has the same bits for any thread
  // count (an OpenMP reduction adds partial sums in an unspecified order).
  std::vector<double> row_loss(n, 0.0);
#pragma omp parallel for schedule(static) if (n * k > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    pl[i] = 0.0f;
    if (t[i] == ignore_index) continue;  // MLM batches ignore most rows: skip their exps
    const float* row = px + i * k;
    pl[i] = row_log_sum_exp(row, k);
    row_loss[i] = static_cast<double>(pl[i]) - row[t[i]];
  }
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == ignore_index) continue;
    total += row_loss[i];
    ++counted;
  }
  loss.data<float>()[0] = counted > 0 ? static_cast<float>(total / static_cast<double>(counted)) : 0.0f;
  count.data<float>()[0] = static_cast<float>(counted);
}

MT_VECTOR_CLONES void cross_entropy_ignore_backward(const Tensor& logits, const Tensor& targets,
                                                    int64_t ignore_index, const Tensor& lse, const Tensor& count,
                                                    const Tensor& gloss, Tensor& gx) {
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  const float* px = logits.data<float>();
  const int64_t* t = targets.data<int64_t>();
  const float* pl = lse.data<float>();
  float* out = gx.data<float>();
  const float counted = count.data<float>()[0];
  const float g = counted > 0.0f ? gloss.data<float>()[0] / counted : 0.0f;
#pragma omp parallel for schedule(static) if (n * k > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * k;
    if (t[i] == ignore_index) {
      std::fill(o, o + k, 0.0f);
      continue;
    }
    row_softmax_times(px + i * k, k, pl[i], g, o);
    o[t[i]] -= g;
  }
}

}  // namespace mt::core::cpu
