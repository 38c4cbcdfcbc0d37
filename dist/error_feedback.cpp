#include "dist/error_feedback.h"

#include "core/error.h"

namespace mt::dist {

ErrorFeedback::ErrorFeedback(int64_t numel) : residual_(Tensor::zeros({numel})) {}

Tensor ErrorFeedback::corrected(const Tensor& grad) const {
  MT_CHECK(grad.numel() == numel(), "error feedback: gradient of ", grad.numel(),
           " values, residual of ", numel());
  Tensor v = grad.contiguous().reshape({numel()}).clone();
  v.add_(residual_);
  return v;
}

void ErrorFeedback::update(const Tensor& corrected, const Tensor& decoded) {
  residual_.copy_(corrected);
  residual_.add_(decoded, -1.0f);
}

}  // namespace mt::dist
