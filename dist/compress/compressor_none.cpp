// NONE: the gradient as is. Used by full-precision steps and to check that the compressed
// code path equals plain S-SGD. clone() keeps the device, so it serves CPU and CUDA tensors alike.
#include "dist/compress/compressor.h"

namespace mt::dist {
namespace {

class NoneCompressor final : public Compressor {
 public:
  std::string name() const override { return "none"; }
  Tensor compress(const Tensor& in) const override { return in.clone(); }
  Tensor decompress(const Tensor& payload, int64_t) const override { return payload.clone(); }
  bool summable() const override { return true; }
  core::DType payload_dtype() const override { return core::DType::Float32; }
  int64_t payload_numel(int64_t numel) const override { return numel; }
};

}  // namespace

std::unique_ptr<Compressor> make_none_compressor() { return std::make_unique<NoneCompressor>(); }

}  // namespace mt::dist
