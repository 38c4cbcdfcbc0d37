#include "dist/compress/error_feedback.h"

#include "core/error.h"

namespace mt::dist {

ErrorFeedback::ErrorFeedback(int64_t numel, core::Device device)
    : residual_(Tensor::zeros({numel}, core::DType::Float32, device)) {}

void ErrorFeedback::follow(core::Device device) const {
  if (residual_.device() != device) residual_ = residual_.to(device);
}

void ErrorFeedback::check_gradient(const Tensor& grad) const {
  MT_CHECK(grad.numel() == numel(), "error feedback: gradient of ", grad.numel(),
           " values, residual of ", numel());
  MT_CHECK(grad.dtype() == core::DType::Float32, "error feedback: the gradient must be float32, got ",
           grad.str());
  follow(grad.device());
}

Tensor ErrorFeedback::corrected(const Tensor& grad) const {
  check_gradient(grad);
  Tensor v = grad.contiguous().reshape({numel()}).clone();
  v.add_(residual_);
  return v;
}

void ErrorFeedback::update(const Tensor& corrected, const Tensor& decoded) {
  MT_CHECK(corrected.device() == decoded.device(), "error feedback: the corrected gradient (",
           corrected.str(), ") and its decoded payload (", decoded.str(), ") must be on one device");
  follow(corrected.device());
  residual_.copy_(corrected);
  residual_.add_(decoded.reshape({numel()}), -1.0f);
}

Tensor ErrorFeedback::compress(const Compressor& compressor, const Tensor& grad, Tensor* decoded) {
  check_gradient(grad);
  return compressor.compress_with_feedback(grad, residual_, decoded);
}

}  // namespace mt::dist
