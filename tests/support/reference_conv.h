// conv2d (core/ops/conv.cpp) on the reference kernels alone (im2col + GEMM, NCHW), with its
// backward: what the tests hold oneDNN's convolutions to inside a network, by calling
// cpu::conv2d_*_reference directly.
#pragma once
#include <cstdint>

#include "core/function_node.h"
#include "core/kernels/cpu/conv.h"
#include "core/tensor.h"

namespace mt::testing {

inline core::Tensor reference_conv2d(const core::Tensor& x, const core::Tensor& w, const core::Tensor& bias,
                                     int64_t stride, int64_t padding) {
  using core::Tensor;
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  const int64_t ho = (x.size(2) + 2 * padding - w.size(2)) / stride + 1;
  const int64_t wo = (x.size(3) + 2 * padding - w.size(3)) / stride + 1;
  Tensor y = Tensor::empty({x.size(0), w.size(0), ho, wo});
  core::cpu::conv2d_forward_reference(xc, wc, bias, stride, padding, y);
  std::vector<Tensor> inputs = {x, w};
  if (bias.defined()) inputs.push_back(bias);
  core::record("ReferenceConv2dBackward", inputs, {y},
               [x = xc.detach(), w = wc.detach(), stride, padding](const core::Grads& g, const core::Needs& n) {
                 Tensor gx = n[0] ? Tensor::empty(x.shape()) : Tensor();
                 Tensor gw = n[1] ? Tensor::empty(w.shape()) : Tensor();
                 Tensor gb = n.size() > 2 && n[2] ? Tensor::empty({w.size(0)}) : Tensor();
                 core::cpu::conv2d_backward_reference(x, w, g[0].contiguous(), stride, padding, gx, gw, gb);
                 core::Grads r = {gx, gw};
                 if (n.size() > 2) r.push_back(gb);
                 return r;
               });
  return y;
}

}  // namespace mt::testing
