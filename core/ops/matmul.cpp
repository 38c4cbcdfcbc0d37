#include "core/ops/matmul.h"

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/matmul.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/matmul.h"
#endif

namespace mt::core {

Tensor matmul(const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dtype() == DType::Float32 && b.dtype() == DType::Float32, "matmul expects float32, got ",
           a.str(), " and ", b.str());
  MT_CHECK(a.device() == b.device(), "matmul: tensors on different devices");
  MT_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3),
           "matmul supports 2-d x 2-d and 3-d x 3-d (batched), got ", a.str(), " x ", b.str());
  MT_CHECK(a.shape()[a.dim() - 1] == b.shape()[b.dim() - 2], "matmul: inner sizes differ: ",
           a.str(), " x ", b.str());
  Shape out_shape = a.dim() == 2 ? Shape{a.shape()[0], b.shape()[1]}
                                 : Shape{a.shape()[0], a.shape()[1], b.shape()[2]};
  if (a.dim() == 3) MT_CHECK(a.shape()[0] == b.shape()[0], "matmul: batch sizes differ: ", a.str(), " x ", b.str());
  Tensor out = Tensor::empty(out_shape, DType::Float32, a.device());
  MT_DISPATCH(a.device(), matmul, a, b, out);
  record("MatmulBackward", {a, b}, {out}, [a = a.detach(), b = b.detach()](const Grads& g, const Needs& n) -> Grads {
    const int64_t l = a.dim() - 1;  // last two dims are the matrix
    return {n[0] ? matmul(g[0], b.transpose(l - 1, l)) : Tensor(),
            n[1] ? matmul(a.transpose(l - 1, l), g[0]) : Tensor()};
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  MT_CHECK(x.dim() == 2, "linear expects input [N, in_features], got ", x.str());
  MT_CHECK(weight.dim() == 2 && weight.shape()[1] == x.shape()[1], "linear: weight ", weight.str(),
           " does not match input ", x.str());
  MT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == weight.shape()[0]),
           "linear: bias ", bias.str(), " does not match weight ", weight.str());
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor out = Tensor::empty({x.shape()[0], weight.shape()[0]}, DType::Float32, x.device());
  MT_DISPATCH(x.device(), linear_forward, xc, wc, bias, out);
  std::vector<Tensor> inputs = {x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record("LinearBackward", inputs, {out}, [x = xc.detach(), w = wc.detach()](const Grads& g, const Needs& n) -> Grads {
    Tensor go = g[0].contiguous();
    Grads r = {n[0] ? matmul(go, w) : Tensor(), n[1] ? matmul(go.transpose(0, 1), x) : Tensor()};
    if (n.size() > 2) {
      Tensor gb = Tensor::empty({go.shape()[1]}, DType::Float32, go.device());
      if (n[2]) MT_DISPATCH(go.device(), bias_grad, go, gb);
      r.push_back(n[2] ? gb : Tensor());
    }
    return r;
  });
  return out;
}

}  // namespace mt::core
