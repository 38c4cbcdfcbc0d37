// Concatenation as 2-d copies: viewing each tensor as [outer, size(dim) * inner], input i owns
// one run of every row of the output, so one cudaMemcpy2DAsync per input moves it (rows of
// `run` floats, `run` apart in the input and `out_row` apart in the output).
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/kernels/cuda/concat.h"

namespace mt::core::cuda {

namespace {
void copy_rows(float* dst, int64_t dst_row, const float* src, int64_t src_row, int64_t run, int64_t rows) {
  if (run == 0 || rows == 0) return;
  constexpr size_t f = sizeof(float);
  MT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_row * f, src, src_row * f, run * f, rows,
                                  cudaMemcpyDeviceToDevice, nullptr));
}
}  // namespace

void cat_forward(const std::vector<Tensor>& xs, int64_t dim, Tensor& out) {
  const int64_t outer = outer_size(out.shape(), dim), inner = inner_size(out.shape(), dim);
  const int64_t out_row = out.shape()[dim] * inner;
  int64_t start = 0;
  for (const Tensor& x : xs) {
    const int64_t run = x.shape()[dim] * inner;
    copy_rows(out.data<float>() + start, out_row, x.data<float>(), run, run, outer);
    start += run;
  }
}

void cat_backward(const Tensor& g, int64_t dim, const std::vector<int64_t>& sizes,
                  std::vector<Tensor>& gxs) {
  const int64_t outer = outer_size(g.shape(), dim), inner = inner_size(g.shape(), dim);
  const int64_t g_row = g.shape()[dim] * inner;
  int64_t start = 0;
  for (size_t i = 0; i < gxs.size(); ++i) {
    const int64_t run = sizes[i] * inner;
    if (gxs[i].defined()) copy_rows(gxs[i].data<float>(), run, g.data<float>() + start, g_row, run, outer);
    start += run;
  }
}

}  // namespace mt::core::cuda
