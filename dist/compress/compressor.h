// Gradient compressors (README.md's table): a flat float32 vector to a payload and back, no
// memory of earlier calls (error feedback is the caller's, error_feedback.h). Summable payloads
// add up by allreduce; the others are uint8 bytes of a size fixed by n, allgathered.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mt::dist {

using core::Tensor;

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;  // "TWO_BIT(tau=0.5)"
  // in: flat, contiguous float32 on the CPU or a CUDA device. Returns a payload of
  // payload_numel(in.numel()) on in's device; both devices write the same bytes (CUDA kernels:
  // core/kernels/cuda/compress.h).
  virtual Tensor compress(const Tensor& in) const = 0;
  // Back to `numel` float32 values (numel = the compressed input's), on the payload's device.
  virtual Tensor decompress(const Tensor& payload, int64_t numel) const = 0;

  // The two fused steps of an exchange (gradient_exchange.h). Each default runs the plain steps
  // one after another; a compressor may do them in one pass over memory instead (TWO_BIT on
  // the CPU), giving the same bits.
  //
  // Error feedback and compression: v = grad + residual; returns compress(v), sets residual
  // <- v - decompress(payload) and, if `decoded` is given, *decoded = decompress(payload).
  // grad: float32 of residual's numel, any shape, on residual's device (error_feedback.h).
  virtual Tensor compress_with_feedback(const Tensor& grad, Tensor& residual, Tensor* decoded) const;
  // The sum of `count` payloads of `numel` values each, lying one after another in `payloads`
  // (an allgather's output): decompress(p_0) + decompress(p_1) + ..., added in that order
  // starting from zeros, so every rank that sums the same payloads gets the same bits.
  virtual Tensor decompress_sum(const Tensor& payloads, int count, int64_t numel) const;

  virtual bool summable() const = 0;
  virtual core::DType payload_dtype() const = 0;
  virtual int64_t payload_numel(int64_t numel) const = 0;
  int64_t payload_bytes(int64_t numel) const {
    return payload_numel(numel) * static_cast<int64_t>(core::element_size(payload_dtype()));
  }
};

struct CompressionOptions {
  std::string type = "none";  // NONE, FP16, TWO_BIT, TOPK, SIGN
  double tau = 0.5;           // TWO_BIT threshold
  double topk_ratio = 0.01;   // TOPK fraction kept, (0, 1]
  int topk_warmup_iters = 0;  // TOPK ratio warm-up (DGC); 0 = none
};

// DGC's ratio warm-up: the TOPK ratio of exchange `iteration` (0-based) falls exponentially
// from 1 towards options.topk_ratio, ratio^((iteration+1)/warmup), reaching it at iteration
// warmup-1: dense exchanges while the gradients change fast, at the start of training.
double topk_ratio_at(const CompressionOptions& options, int64_t iteration);

std::vector<std::string> compressor_names();
// Checks the options (an Error names the dist.* field and its valid range).
std::unique_ptr<Compressor> make_compressor(const CompressionOptions& options);

// One per file (compressor_*.cpp).
std::unique_ptr<Compressor> make_none_compressor();
std::unique_ptr<Compressor> make_fp16_compressor();
std::unique_ptr<Compressor> make_bf16_compressor();  // the bf16 hook's (comm_hook.h), no config type
std::unique_ptr<Compressor> make_two_bit_compressor(float tau);
std::unique_ptr<Compressor> make_topk_compressor(double ratio);
std::unique_ptr<Compressor> make_sign_compressor();

}  // namespace mt::dist
