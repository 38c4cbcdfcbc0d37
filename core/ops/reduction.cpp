#include "core/ops/reduction.h"

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/reduction.h"
#include "core/ops/elementwise.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/reduction.h"
#endif

namespace mt::core {

namespace {
int64_t wrap_dim(int64_t d, int64_t nd, const char* op) {
  MT_CHECK(d >= -nd && d < nd, op, ": dimension ", d, " out of range for a ", nd, "-d tensor");
  return d < 0 ? d + nd : d;
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MT_CHECK(x.dtype() == DType::Float32, "sum expects float32, got ", x.str());
  std::vector<bool> reduce(x.dim(), false);
  for (int64_t d : dims) reduce[wrap_dim(d, x.dim(), "sum")] = true;
  Shape kept = x.shape();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduce[d]) kept[d] = 1;
  Tensor out = Tensor::empty(kept, DType::Float32, x.device());
  MT_DISPATCH(x.device(), sum_dims, x, reduce, out);
  if (!keepdim) {
    Shape squeezed;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!reduce[d]) squeezed.push_back(kept[d]);
    out = out.view(squeezed);
  }
  record("SumBackward", {x}, {out}, [sx = x.shape(), kept](const Grads& g, const Needs&) -> Grads {
    return {expand(g[0].reshape(kept), sx)};
  });
  return out;
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) all[d] = d;
  return sum(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[wrap_dim(d, x.dim(), "mean")];
  return mul(sum(x, dims, keepdim), count == 0 ? 0.0f : 1.0f / static_cast<float>(count));
}

Tensor mean(const Tensor& x) {
  return mul(sum(x), x.numel() == 0 ? 0.0f : 1.0f / static_cast<float>(x.numel()));
}

Tensor argmax(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "argmax");
  MT_CHECK(x.shape()[dim] > 0, "argmax over an empty dimension");
  Shape out_shape;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) out_shape.push_back(x.shape()[d]);
  Tensor out = Tensor::empty(out_shape, DType::Int64, x.device());
  MT_DISPATCH(x.device(), argmax_dim, x, dim, out);
  return out;
}

}  // namespace mt::core
