#include "layers/conv2d.h"

#include "core/ops/nn.h"
#include "layers/init.h"

namespace mt::layers {

Conv2d::Conv2d(const Conv2dLayerOptions& opt, core::Generator& gen) : opt_(opt) {
  MT_CHECK(opt.in_channels > 0 && opt.out_channels > 0, "Conv2d: in_channels and out_channels must be > 0, got ",
           opt.in_channels, " and ", opt.out_channels);
  MT_CHECK(opt.kernel > 0 && opt.stride > 0 && opt.padding >= 0, "Conv2d: need kernel > 0, stride > 0, padding >= 0; got kernel ",
           opt.kernel, ", stride ", opt.stride, ", padding ", opt.padding);
  Tensor w = Tensor::empty({opt.out_channels, opt.in_channels, opt.kernel, opt.kernel});
  Tensor b = opt.bias ? Tensor::empty({opt.out_channels}) : Tensor();
  default_init_(w, b, gen);
  weight_ = register_parameter("weight", w);
  if (opt.bias) bias_ = register_parameter("bias", b);
}

Tensor Conv2d::forward(const Tensor& x) {
  run_forward_pre_hooks();
  MT_CHECK(x.dim() == 4 && x.size(1) == opt_.in_channels, "Conv2d(", opt_.in_channels, " -> ", opt_.out_channels,
           "): expected input [N, ", opt_.in_channels, ", H, W], got ", x.str());
  MT_CHECK(x.size(2) + 2 * opt_.padding >= opt_.kernel && x.size(3) + 2 * opt_.padding >= opt_.kernel,
           "Conv2d: input ", x.str(), " is smaller than the ", opt_.kernel, "x", opt_.kernel,
           " kernel (padding ", opt_.padding, "); use larger images or a smaller model");
  core::Conv2dOptions o;
  o.stride = opt_.stride;
  o.padding = opt_.padding;
  return core::conv2d(x, weight_, bias_, o);
}

}  // namespace mt::layers
