// 2-d convolution (declared in nn.h). The CPU kernels (core/kernels/cpu/conv.cpp) run oneDNN's
// convolutions, or im2col + GEMM as the reference.
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/conv.h"
#include "core/memory_format.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/conv.h"
#endif

namespace mt::core {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dOptions opt) {
  MT_CHECK(x.dtype() == DType::Float32 && weight.dtype() == DType::Float32,
           "conv2d expects float32 input and weight, got ", x.str(), " and ", weight.str());
  MT_CHECK(x.dim() == 4, "conv2d expects input [N, C, H, W], got ", x.str());
  MT_CHECK(weight.dim() == 4, "conv2d expects weight [out_channels, in_channels, kh, kw], got ",
           weight.str());
  MT_CHECK(x.device() == weight.device(), "conv2d: input ", x.str(), " and weight ", weight.str(),
           " are on different devices");
  MT_CHECK(x.shape()[1] == weight.shape()[1], "conv2d: input has ", x.shape()[1],
           " channels but the weight ", weight.str(), " expects ", weight.shape()[1],
           " (input ", x.str(), ")");
  MT_CHECK(opt.stride >= 1, "conv2d: stride must be >= 1, got ", opt.stride);
  MT_CHECK(opt.padding >= 0, "conv2d: padding must be >= 0, got ", opt.padding);
  if (bias.defined()) {
    MT_CHECK(bias.dtype() == DType::Float32 && bias.dim() == 1 && bias.shape()[0] == weight.shape()[0],
             "conv2d: bias must be float32 [", weight.shape()[0], "] (one per output channel), got ",
             bias.str());
    MT_CHECK(bias.device() == x.device(), "conv2d: bias ", bias.str(), " is on another device than the input");
  }
  const int64_t kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t hp = x.shape()[2] + 2 * opt.padding, wp = x.shape()[3] + 2 * opt.padding;
  MT_CHECK(kh <= hp && kw <= wp, "conv2d: kernel ", kh, "x", kw, " is larger than the padded input ",
           hp, "x", wp, " (input ", x.str(), ", padding ", opt.padding, ")");
  const int64_t ho = (hp - kh) / opt.stride + 1, wo = (wp - kw) / opt.stride + 1;

  // On the CPU with oneDNN the output is channels-last (core/memory_format.h): its fastest
  // kernels read and write that order, so a network of convolutions never reorders between
  // them. The input may be either: an NCHW batch of images is reordered once, inside.
  const bool channels_last = x.device().is_cpu() && cpu::conv2d_prefers_channels_last();
  Tensor xc = channels_last && is_channels_last(x) ? x : x.contiguous();
  Tensor wc = weight.contiguous();
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  const Shape y_shape = {x.shape()[0], weight.shape()[0], ho, wo};
  Tensor y = empty_in_format(y_shape, channels_last, x.device());
  MT_DISPATCH(x.device(), conv2d_forward, xc, wc, bc, opt.stride, opt.padding, y);

  std::vector<Tensor> inputs = {x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record("Conv2dBackward", inputs, {y},
         [x = xc.detach(), w = wc.detach(), opt, channels_last](const Grads& g, const Needs& n) -> Grads {
           Tensor gy = in_format(g[0], channels_last);
           // Undefined outputs tell the kernel to skip that product; the first layer's input
           // (the data) needs no gradient, which saves the W^T * dy GEMM and col2im.
           Tensor gx = n[0] ? empty_in_format_of(x) : Tensor();
           Tensor gw = n[1] ? Tensor::empty(w.shape(), DType::Float32, w.device()) : Tensor();
           Tensor gb = n.size() > 2 && n[2] ? Tensor::empty({w.shape()[0]}, DType::Float32, w.device())
                                            : Tensor();
           MT_DISPATCH(x.device(), conv2d_backward, x, w, gy, opt.stride, opt.padding, gx, gw, gb);
           Grads r = {gx, gw};
           if (n.size() > 2) r.push_back(gb);
           return r;
         });
  return y;
}

}  // namespace mt::core
