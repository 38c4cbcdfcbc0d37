// Cross-entropy over the rows whose target is not ignored (declared in transformer.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/cross_entropy_ignore.h"
#include "core/ops/transformer.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/cross_entropy_ignore.h"
#endif

namespace mt::core {

Tensor cross_entropy_ignore(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  MT_CHECK(logits.dtype() == DType::Float32 && logits.dim() == 2 && logits.shape()[1] > 0,
           "cross_entropy_ignore expects float32 logits [N, classes], got ", logits.str());
  MT_CHECK(targets.dtype() == DType::Int64 && targets.dim() == 1,
           "cross_entropy_ignore expects int64 targets [N], got ", targets.str());
  MT_CHECK(targets.shape()[0] == logits.shape()[0], "cross_entropy_ignore: ", targets.shape()[0],
           " targets for ", logits.shape()[0], " rows of logits ", logits.str());
  MT_CHECK(targets.device() == logits.device(), "cross_entropy_ignore: targets ", targets.str(),
           " are on another device than the logits ", logits.str());
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  Tensor xc = logits.contiguous(), tc = targets.contiguous();
  // CUDA kernels check the range on the device: reading targets here would stall the stream.
  if (!tc.is_cuda()) {
    const int64_t* t = tc.data<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      MT_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < k), "cross_entropy_ignore: target ", t[i],
               " at position ", i, " is out of range for ", k, " classes (valid targets are 0..", k - 1,
               ", or ", ignore_index, " to ignore the row); check the labels against the vocabulary size");
  }
  Tensor loss = Tensor::empty({}, DType::Float32, logits.device());
  Tensor lse = Tensor::empty({n}, DType::Float32, logits.device());
  Tensor count = Tensor::empty({}, DType::Float32, logits.device());
  MT_DISPATCH(xc.device(), cross_entropy_ignore_forward, xc, tc, ignore_index, loss, lse, count);
  record("CrossEntropyIgnoreBackward", {logits}, {loss},
         [x = xc.detach(), tc, ignore_index, lse, count](const Grads& g, const Needs&) -> Grads {
           Tensor gx = Tensor::empty(x.shape(), DType::Float32, x.device());
           MT_DISPATCH(x.device(), cross_entropy_ignore_backward, x, tc, ignore_index, lse, count,
                       g[0].contiguous(), gx);
           return {gx};
         });
  return loss;
}

}  // namespace mt::core
