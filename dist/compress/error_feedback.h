// Error feedback (EF-SGD, 1-bit SGD): v = g + r; send Q(v); r <- v - decode(Q(v)), so that
// r_new + decode(Q(v)) == g + r_old exactly: compression delays information, never drops it.
// Tensor ops only: the residual follows the gradients' device.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "dist/compress/compressor.h"

namespace mt::dist {

using core::Tensor;

class ErrorFeedback {
 public:
  explicit ErrorFeedback(int64_t numel, core::Device device = core::Device::cpu());
  // g + r, a new tensor on g's device (g: float32 of numel() values, any shape).
  Tensor corrected(const Tensor& grad) const;
  // r <- corrected - decoded (both on one device; the residual moves there).
  void update(const Tensor& corrected, const Tensor& decoded);
  // corrected, compression and update in one call: returns the payload of Q(g + r) and sets
  // r <- g + r - decode(Q(g + r)); `decoded` (optional) receives decode(Q(g + r)). The same
  // bits as the three steps, in one pass over memory where the compressor can
  // (Compressor::compress_with_feedback).
  Tensor compress(const Compressor& compressor, const Tensor& grad, Tensor* decoded = nullptr);
  int64_t numel() const { return residual_.numel(); }
  const Tensor& residual() const { return residual_; }
  Tensor& residual() { return residual_; }
  core::Device device() const { return residual_.device(); }

 private:
  // A float32 gradient of numel() values; moves the residual to its device.
  void check_gradient(const Tensor& grad) const;
  // Moving the residual to another device changes where it lives, not its value: corrected()
  // stays const.
  void follow(core::Device device) const;
  mutable Tensor residual_;
};

}  // namespace mt::dist
