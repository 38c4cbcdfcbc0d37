// Softmax, log-softmax and the classification losses (declared in nn.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/softmax_loss.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/softmax_loss.h"
#endif

namespace mt::core {

namespace {

int64_t wrap_dim(const char* op, int64_t dim, const Tensor& x) {
  const int64_t nd = x.dim();
  MT_CHECK(nd >= 1 && dim >= -nd && dim < nd, op, ": dimension ", dim, " out of range for ", x.str());
  return dim < 0 ? dim + nd : dim;
}

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  MT_CHECK(x.dtype() == DType::Float32, op, " expects a float32 tensor, got ", x.str());
  dim = wrap_dim(op, dim, x);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  MT_DISPATCH(x.device(), softmax_forward, xc, dim, log, y);
  // Both gradients are functions of the output alone, so only y is kept.
  record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {y},
         [y = y.detach(), dim, log](const Grads& g, const Needs&) -> Grads {
           Tensor gy = g[0].contiguous();
           Tensor gx = Tensor::empty(y.shape(), DType::Float32, y.device());
           MT_DISPATCH(y.device(), softmax_backward, y, gy, dim, log, gx);
           return {gx};
         });
  return y;
}

// Shapes, types and (for CPU tensors) the label range of a classification loss's arguments.
// A CUDA kernel must check the range on the device instead: reading the labels here would
// stall the stream every step.
void check_classification(const char* op, const Tensor& scores, const Tensor& targets) {
  MT_CHECK(scores.dtype() == DType::Float32 && scores.dim() == 2, op,
           " expects float32 scores [N, classes], got ", scores.str());
  MT_CHECK(targets.dtype() == DType::Int64 && targets.dim() == 1, op,
           " expects int64 class labels [N], got ", targets.str());
  MT_CHECK(targets.shape()[0] == scores.shape()[0], op, ": ", targets.shape()[0], " labels for ",
           scores.shape()[0], " rows of scores ", scores.str());
  MT_CHECK(scores.shape()[0] > 0, op, ": empty batch ", scores.str());
  MT_CHECK(targets.device() == scores.device(), op, ": labels ", targets.str(),
           " are on another device than the scores ", scores.str());
  if (targets.is_cuda()) return;
  const int64_t k = scores.shape()[1];
  Tensor tc = targets.contiguous();
  const int64_t* t = tc.data<int64_t>();
  for (int64_t i = 0; i < tc.numel(); ++i)
    MT_CHECK(t[i] >= 0 && t[i] < k, op, ": label ", t[i], " at position ", i,
             " is out of range for ", k, " classes (valid labels are 0..", k - 1,
             "); check the dataset's labels against the model's number of classes");
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }

Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets) {
  check_classification("nll_loss", log_probs, targets);
  Tensor lp = log_probs.contiguous(), tc = targets.contiguous();
  Tensor loss = Tensor::empty({}, DType::Float32, log_probs.device());
  MT_DISPATCH(lp.device(), nll_loss_forward, lp, tc, loss);
  record("NllLossBackward", {log_probs}, {loss},
         [tc, shape = lp.shape()](const Grads& g, const Needs&) -> Grads {
           Tensor gx = Tensor::empty(shape, DType::Float32, tc.device());
           MT_DISPATCH(tc.device(), nll_loss_backward, g[0].contiguous(), tc, gx);
           return {gx};
         });
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  check_classification("cross_entropy", logits, targets);
  Tensor xc = logits.contiguous(), tc = targets.contiguous();
  Tensor loss = Tensor::empty({}, DType::Float32, logits.device());
  // Each row's log-sum-exp: with it backward rebuilds softmax = exp(x - lse) from the logits
  // without storing an [N, K] probability matrix.
  Tensor lse = Tensor::empty({logits.shape()[0]}, DType::Float32, logits.device());
  MT_DISPATCH(xc.device(), cross_entropy_forward, xc, tc, loss, lse);
  record("CrossEntropyBackward", {logits}, {loss},
         [x = xc.detach(), tc, lse](const Grads& g, const Needs&) -> Grads {
           Tensor gx = Tensor::empty(x.shape(), DType::Float32, x.device());
           MT_DISPATCH(x.device(), cross_entropy_backward, x, tc, lse, g[0].contiguous(), gx);
           return {gx};
         });
  return loss;
}

}  // namespace mt::core
