#include "layers/batch_norm2d.h"

#include "core/grad_mode.h"
#include "core/ops/nn.h"

namespace mt::layers {

BatchNorm2d::BatchNorm2d(int64_t num_features, float momentum, float eps, bool affine)
    : num_features_(num_features), momentum_(momentum), eps_(eps) {
  MT_CHECK(num_features > 0, "BatchNorm2d: num_features must be > 0, got ", num_features);
  MT_CHECK(momentum >= 0 && momentum <= 1, "BatchNorm2d: momentum must be in [0, 1], got ", momentum);
  MT_CHECK(eps > 0, "BatchNorm2d: eps must be > 0, got ", eps);
  if (affine) {
    weight_ = register_parameter("weight", Tensor::ones({num_features}));
    bias_ = register_parameter("bias", Tensor::zeros({num_features}));
  }
  running_mean_ = register_buffer("running_mean", Tensor::zeros({num_features}));
  running_var_ = register_buffer("running_var", Tensor::ones({num_features}));
  num_batches_tracked_ = register_buffer("num_batches_tracked", Tensor::zeros({}));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return normalize(x, false); }

Tensor BatchNorm2d::forward_relu(const Tensor& x) { return normalize(x, true); }

Tensor BatchNorm2d::normalize(const Tensor& x, bool relu) {
  run_forward_pre_hooks();
  MT_CHECK(x.dim() == 4 && x.size(1) == num_features_, "BatchNorm2d(", num_features_,
           "): expected input [N, ", num_features_, ", H, W], got ", x.str());
  const bool training = is_training();
  MT_CHECK(!training || x.size(0) * x.size(2) * x.size(3) > 1, "BatchNorm2d: training needs more than one value per channel, got ",
           x.str(), "; use a batch size > 1 or call eval()");
  // The op takes the running statistics by reference and updates them in place. Pass handles
  // to the registered buffers, and if the op ever rebinds them instead, copy the new values
  // back so the registered buffers (what state_dict saves) stay current.
  Tensor mean = running_mean_, var = running_var_;
  Tensor y = (relu ? core::batch_norm_relu : core::batch_norm)(x, weight_, bias_, mean, var, training,
                                                               momentum_, eps_);
  if (training) {
    core::NoGradGuard no_grad;
    if (!mean.same(running_mean_)) running_mean_.copy_(mean);
    if (!var.same(running_var_)) running_var_.copy_(var);
    // Counting on the buffer's own device with add_ needs no host round trip (a GPU sync).
    if (!one_.defined() || one_.device() != num_batches_tracked_.device())
      one_ = Tensor::ones({}, core::DType::Float32, num_batches_tracked_.device());
    num_batches_tracked_.add_(one_);
  }
  return y;
}

}  // namespace mt::layers
