// Batch normalization over the channels of NCHW inputs (Ioffe & Szegedy 2015). In training it
// normalizes with the batch's statistics and tracks running averages of them; in evaluation it
// uses the running averages, so a prediction does not depend on the rest of the batch.
//
// Buffers (saved, not trained): running_mean, running_var (float32 [C]) and
// num_batches_tracked, the same names as PyTorch. The counter is a float32 scalar (exact up to
// 2^24 batches) rather than PyTorch's int64, so it can be incremented on any device with the
// float in-place ops; load_state_dict converts an int64 one.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class BatchNorm2d : public Module {
 public:
  // weight (gamma) starts at 1 and bias (beta) at 0, so the layer starts as plain
  // normalization. momentum is the weight of the new batch in the running averages.
  explicit BatchNorm2d(int64_t num_features, float momentum = 0.1f, float eps = 1e-5f, bool affine = true);
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> same shape
  // relu(forward(x)), with the ReLU fused into the norm's kernels (core::batch_norm_relu).
  Tensor forward_relu(const Tensor& x);
  std::string type_name() const override { return "BatchNorm2d"; }

  const Tensor& weight() const { return weight_; }  // undefined without affine
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  int64_t num_batches_tracked() const { return static_cast<int64_t>(num_batches_tracked_.item()); }

 private:
  int64_t num_features_;
  float momentum_, eps_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
  Tensor one_;  // the constant 1 on the counter's device

  Tensor normalize(const Tensor& x, bool relu);
};

}  // namespace mt::layers
