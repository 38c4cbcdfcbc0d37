#include "core/memory_format.h"

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/elementwise.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/elementwise.h"
#endif

namespace mt::core {

Shape channels_last_strides(const Shape& s) {
  MT_CHECK(s.size() == 4, "channels-last needs a 4-d shape [N, C, H, W], got ", shape_str(s));
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4 || t.is_contiguous()) return false;
  const Shape want = channels_last_strides(t.shape());
  for (int d = 0; d < 4; ++d)
    if (t.shape()[d] != 1 && t.strides()[d] != want[d]) return false;
  return true;
}

bool keeps_channels_last(const Tensor& t) { return t.device().is_cpu() && is_channels_last(t); }

bool same_dense_order(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && ((a.is_contiguous() && b.is_contiguous()) ||
                                    (is_channels_last(a) && is_channels_last(b)));
}

Tensor empty_channels_last(const Shape& s, Device device, DType dtype) {
  const Shape nhwc = {s.at(0), s.at(2), s.at(3), s.at(1)};
  Tensor storage = Tensor::empty(nhwc, dtype, device);
  return make_view(storage, s, channels_last_strides(s), 0);
}

Tensor empty_in_format(const Shape& s, bool channels_last, Device device, DType dtype) {
  return channels_last ? empty_channels_last(s, device, dtype) : Tensor::empty(s, dtype, device);
}

Tensor empty_in_format_of(const Tensor& like) {
  return empty_in_format(like.shape(), is_channels_last(like), like.device());
}

Tensor in_format(const Tensor& t, bool channels_last) {
  if (channels_last ? is_channels_last(t) : t.is_contiguous()) return t;
  Tensor out = empty_in_format(t.shape(), channels_last, t.device());
  MT_DISPATCH(t.device(), copy, t, out);
  return out;
}

Tensor in_format_of(const Tensor& t, const Tensor& like) {
  MT_CHECK(t.shape() == like.shape(), "in_format_of: ", t.str(), " is not shaped like ", like.str());
  return in_format(t, is_channels_last(like));
}

Tensor to_channels_last(const Tensor& x) {
  MT_CHECK(x.dim() == 4, "to_channels_last expects [N, C, H, W], got ", x.str());
  Tensor out = in_format(x, true);
  if (!out.same(x))
    record("ToChannelsLastBackward", {x}, {out}, [](const Grads& g, const Needs&) -> Grads { return {g[0]}; });
  return out;
}

}  // namespace mt::core
