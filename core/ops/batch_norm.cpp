// Batch normalization (declared in nn.h).
#include <algorithm>

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/batch_norm.h"
#include "core/memory_format.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/batch_norm.h"
#endif

namespace mt::core {

namespace {
// A per-channel tensor (weight, bias, running statistic) must be float32 [C] next to x.
void check_channel_param(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  const int64_t c = x.shape()[1];
  MT_CHECK(t.dtype() == DType::Float32 && t.dim() == 1 && t.shape()[0] == c, "batch_norm: ", what,
           " must be float32 [", c, "] (one value per channel of the input ", x.str(), "), got ",
           t.str());
  MT_CHECK(t.device() == x.device(), "batch_norm: ", what, " ", t.str(),
           " is on another device than the input ", x.str());
  MT_CHECK(t.is_contiguous(), "batch_norm: ", what, " must be contiguous");
}
// batch_norm and batch_norm_relu: one op, with relu fusing the activation into its kernels.
Tensor batch_norm_op(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                     Tensor& running_var, bool training, float momentum, float eps, bool relu) {
  MT_CHECK(x.dtype() == DType::Float32, "batch_norm expects a float32 input, got ", x.str());
  MT_CHECK(x.dim() == 4 || x.dim() == 2, "batch_norm expects input [N, C, H, W] or [N, C], got ",
           x.str());
  check_channel_param("weight", weight, x);
  check_channel_param("bias", bias, x);
  check_channel_param("running_mean", running_mean, x);
  check_channel_param("running_var", running_var, x);
  if (training) {
    const int64_t per_channel = x.numel() / std::max<int64_t>(x.shape()[1], 1);
    MT_CHECK(per_channel > 1, "batch_norm in training needs more than one value per channel to "
             "compute a variance, got input ", x.str(), " (use a batch larger than 1, or eval mode)");
  } else {
    MT_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm in evaluation mode needs running_mean and running_var");
  }

  const int64_t c = x.shape()[1];
  // A channels-last input (from a CPU convolution) is normalized in place of its format.
  Tensor xc = keeps_channels_last(x) ? x : x.contiguous();
  Tensor y = empty_in_format_of(xc);
  Tensor save_mean = Tensor::empty({c}, DType::Float32, x.device());
  Tensor save_invstd = Tensor::empty({c}, DType::Float32, x.device());
  // Running statistics are buffers, not graph inputs: the kernel updates them in place.
  MT_DISPATCH(x.device(), batch_norm_forward, xc, weight, bias, running_mean, running_var, training,
              momentum, eps, relu, y, save_mean, save_invstd);

  // Undefined weight/bias get invalid edges, so their `needs` entries are false. With relu,
  // backward recomputes the ReLU's mask from x, so the bias is kept too (a [C] handle).
  record(relu ? "BatchNormReluBackward" : "BatchNormBackward", {x, weight, bias}, {y},
         [x = xc.detach(), w = weight.defined() ? weight.detach() : Tensor(),
          b = relu && bias.defined() ? bias.detach() : Tensor(), save_mean, save_invstd, training,
          relu](const Grads& g, const Needs& n) -> Grads {
           Tensor gy = in_format_of(g[0], x);
           const int64_t ch = x.shape()[1];
           Tensor gx = n[0] ? empty_in_format_of(x) : Tensor();
           Tensor gw = n[1] ? Tensor::empty({ch}, DType::Float32, x.device()) : Tensor();
           Tensor gb = n[2] ? Tensor::empty({ch}, DType::Float32, x.device()) : Tensor();
           MT_DISPATCH(x.device(), batch_norm_backward, x, w, b, save_mean, save_invstd, gy, training,
                       relu, gx, gw, gb);
           return {gx, gw, gb};
         });
  return y;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum, float eps) {
  return batch_norm_op(x, weight, bias, running_mean, running_var, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, float momentum, float eps) {
  return batch_norm_op(x, weight, bias, running_mean, running_var, training, momentum, eps, true);
}

}  // namespace mt::core
