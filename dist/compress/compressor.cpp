#include "dist/compress/compressor.h"

#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace mt::dist {

Tensor Compressor::compress_with_feedback(const Tensor& grad, Tensor& residual, Tensor* decoded) const {
  const int64_t n = residual.numel();
  Tensor v = grad.contiguous().reshape({n}).clone();
  v.add_(residual);
  Tensor payload = compress(v);
  Tensor own = decompress(payload, n);
  residual.copy_(v);
  residual.add_(own, -1.0f);
  if (decoded) *decoded = own;
  return payload;
}

Tensor Compressor::decompress_sum(const Tensor& payloads, int count, int64_t numel) const {
  const int64_t len = payload_numel(numel);
  MT_CHECK(count >= 1 && payloads.numel() == len * count, "internal: summing ", count, " payloads of ",
           len, " elements each from a buffer of ", payloads.numel());
  Tensor sum = Tensor::zeros({numel}, core::DType::Float32, payloads.device());
  for (int r = 0; r < count; ++r) sum.add_(decompress(payloads.narrow(0, r * len, len).contiguous(), numel));
  return sum;
}

std::vector<std::string> compressor_names() { return {"none", "fp16", "two_bit", "topk", "sign"}; }

std::unique_ptr<Compressor> make_compressor(const CompressionOptions& o) {
  if (o.type == "none") return make_none_compressor();
  if (o.type == "fp16") return make_fp16_compressor();
  if (o.type == "two_bit") {
    MT_CHECK(std::isfinite(o.tau) && o.tau > 0, "dist.compressor.tau must be > 0 (the TWO_BIT "
             "threshold; the reference uses 0.5), got ", o.tau);
    return make_two_bit_compressor(static_cast<float>(o.tau));
  }
  if (o.type == "topk") {
    MT_CHECK(o.topk_ratio > 0 && o.topk_ratio <= 1, "dist.compressor.topk_ratio must be in (0, 1] (the "
             "fraction of gradient values sent, e.g. 0.01), got ", o.topk_ratio);
    MT_CHECK(o.topk_warmup_iters >= 0, "dist.compressor.topk_warmup_iters must be >= 0 (iterations over "
             "which the TOPK ratio falls from 1 to dist.compressor.topk_ratio; 0 = none), got ",
             o.topk_warmup_iters);
    return make_topk_compressor(o.topk_ratio);
  }
  if (o.type == "sign") return make_sign_compressor();
  MT_FAIL("unknown dist.compressor.type \"", o.type, "\"; valid: ", core::join(compressor_names()));
}

}  // namespace mt::dist
