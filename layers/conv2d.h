// 2-d convolution layer over NCHW inputs, square kernels.
#pragma once
#include "core/random.h"
#include "layers/module.h"

namespace mt::layers {

// (Not "Conv2dOptions": that is core::conv2d's stride/padding struct, and code that uses both
// namespaces would find the name ambiguous.)
struct Conv2dLayerOptions {
  int64_t in_channels = 1;
  int64_t out_channels = 1;
  int64_t kernel = 3;
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;  // off before batch norm, which has its own shift
};

class Conv2d : public Module {
 public:
  // Weights drawn with PyTorch's default init from gen (see init.h).
  Conv2d(const Conv2dLayerOptions& opt, core::Generator& gen);
  Tensor forward(const Tensor& x) override;  // [N, in, H, W] -> [N, out, Ho, Wo]
  std::string type_name() const override { return "Conv2d"; }

  const Tensor& weight() const { return weight_; }  // [out, in, k, k]
  const Tensor& bias() const { return bias_; }      // [out] or undefined
  const Conv2dLayerOptions& options() const { return opt_; }

 private:
  Conv2dLayerOptions opt_;
  Tensor weight_, bias_;
};

}  // namespace mt::layers
