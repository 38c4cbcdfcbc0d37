// Concatenation (declared in nn.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/concat.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/concat.h"
#endif

namespace mt::core {

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  MT_CHECK(!xs.empty(), "cat: needs at least one tensor");
  const Tensor& first = xs[0];
  const int64_t nd = first.dim();
  MT_CHECK(nd >= 1 && dim >= -nd && dim < nd, "cat: dimension ", dim, " out of range for ", first.str());
  if (dim < 0) dim += nd;
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  std::vector<int64_t> sizes;
  std::vector<Tensor> contiguous;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    MT_CHECK(x.dtype() == DType::Float32, "cat: tensor ", i, " is ", x.str(), "; cat supports float32");
    MT_CHECK(x.device() == first.device(), "cat: tensor ", i, " ", x.str(),
             " is on another device than tensor 0 ", first.str());
    bool same = x.dim() == nd;
    for (int64_t d = 0; same && d < nd; ++d) same = d == dim || x.shape()[d] == first.shape()[d];
    MT_CHECK(same, "cat: tensor ", i, " ", x.str(), " does not match tensor 0 ", first.str(),
             " in every dimension except ", dim);
    out_shape[dim] += x.shape()[dim];
    sizes.push_back(x.shape()[dim]);
    contiguous.push_back(x.contiguous());
  }
  Tensor out = Tensor::empty(out_shape, DType::Float32, first.device());
  MT_DISPATCH(out.device(), cat_forward, contiguous, dim, out);
  record("CatBackward", xs, {out}, [dim, sizes, shape = first.shape()](const Grads& g, const Needs& n) -> Grads {
    Tensor go = g[0].contiguous();
    Grads gxs(n.size());
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i]) continue;
      Shape s = shape;
      s[dim] = sizes[i];
      gxs[i] = Tensor::empty(s, DType::Float32, go.device());
    }
    MT_DISPATCH(go.device(), cat_backward, go, dim, sizes, gxs);
    return gxs;
  });
  return out;
}

}  // namespace mt::core
