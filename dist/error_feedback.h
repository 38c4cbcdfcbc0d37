// Error feedback (EF-SGD, 1-bit SGD): what a lossy compressor drops this iteration is added
// to the next iteration's gradient instead of being lost, so compression delays information
// but does not discard it. One residual per exchanged buffer (here: one flat buffer holding
// all parameters):
//
//   v = g + r;  send Q(v);  r <- v - decode(Q(v))
//
// so that, exactly, r_new + decode(Q(v)) == g + r_old. A full-precision step sends v itself
// and clears r (algorithms.md section 2).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mt::dist {

using core::Tensor;

class ErrorFeedback {
 public:
  explicit ErrorFeedback(int64_t numel);
  // g + r, a new tensor (g: flat float32 of numel()).
  Tensor corrected(const Tensor& grad) const;
  // r <- corrected - decoded.
  void update(const Tensor& corrected, const Tensor& decoded);
  void clear() { residual_.zero_(); }
  int64_t numel() const { return residual_.numel(); }
  const Tensor& residual() const { return residual_; }
  Tensor& residual() { return residual_; }

 private:
  Tensor residual_;
};

}  // namespace mt::dist
