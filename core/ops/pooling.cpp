// Pooling (declared in nn.h): max, average and global average over NCHW planes (max and global
// average also over channels-last tensors).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/pooling.h"
#include "core/memory_format.h"
#include "core/ops/nn.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/pooling.h"
#endif

namespace mt::core {

namespace {

// Checks the arguments of a kernel x kernel pooling and returns the output shape.
Shape pool_output_shape(const char* op, const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  MT_CHECK(x.dtype() == DType::Float32, op, " expects a float32 tensor, got ", x.str());
  MT_CHECK(x.dim() == 4, op, " expects input [N, C, H, W], got ", x.str());
  MT_CHECK(kernel >= 1 && stride >= 1, op, ": kernel and stride must be >= 1, got kernel ", kernel,
           ", stride ", stride);
  // Larger padding would allow windows that hold only padding (PyTorch has the same rule).
  MT_CHECK(padding >= 0 && padding <= kernel / 2, op, ": padding must be in [0, kernel / 2] = [0, ",
           kernel / 2, "], got ", padding);
  const int64_t hp = x.shape()[2] + 2 * padding, wp = x.shape()[3] + 2 * padding;
  MT_CHECK(kernel <= hp && kernel <= wp, op, ": kernel ", kernel, "x", kernel,
           " is larger than the padded input ", hp, "x", wp, " (input ", x.str(), ")");
  return {x.shape()[0], x.shape()[1], (hp - kernel) / stride + 1, (wp - kernel) / stride + 1};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const Shape out_shape = pool_output_shape("max_pool2d", x, kernel, stride, padding);
  const bool channels_last = keeps_channels_last(x);  // then y, the indices and gx are too
  Tensor xc = channels_last ? x : x.contiguous();
  Tensor y = empty_in_format(out_shape, channels_last, x.device());
  // Where each maximum came from: backward routes the gradient there without searching again.
  Tensor indices = empty_in_format(out_shape, channels_last, x.device(), DType::Int64);
  MT_DISPATCH(x.device(), max_pool2d_forward, xc, kernel, stride, padding, y, indices);
  record("MaxPool2dBackward", {x}, {y},
         [indices, in_shape = x.shape(), channels_last](const Grads& g, const Needs&) -> Grads {
           Tensor gy = in_format(g[0], channels_last);
           Tensor gx = empty_in_format(in_shape, channels_last, gy.device());
           MT_DISPATCH(gy.device(), max_pool2d_backward, gy, indices, gx);
           return {gx};
         });
  return y;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const Shape out_shape = pool_output_shape("avg_pool2d", x, kernel, stride, padding);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, DType::Float32, x.device());
  MT_DISPATCH(x.device(), avg_pool2d_forward, xc, kernel, stride, padding, y);
  record("AvgPool2dBackward", {x}, {y},
         [kernel, stride, padding, in_shape = x.shape()](const Grads& g, const Needs&) -> Grads {
           Tensor gy = g[0].contiguous();
           Tensor gx = Tensor::empty(in_shape, DType::Float32, gy.device());
           MT_DISPATCH(gy.device(), avg_pool2d_backward, gy, kernel, stride, padding, gx);
           return {gx};
         });
  return y;
}

Tensor global_avg_pool2d(const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "global_avg_pool2d expects a float32 tensor, got ", x.str());
  MT_CHECK(x.dim() == 4 && x.shape()[2] > 0 && x.shape()[3] > 0,
           "global_avg_pool2d expects a non-empty input [N, C, H, W], got ", x.str());
  const bool channels_last = keeps_channels_last(x);  // then the gradient is channels-last too
  Tensor xc = channels_last ? x : x.contiguous();
  Tensor y = Tensor::empty({x.shape()[0], x.shape()[1]}, DType::Float32, x.device());
  MT_DISPATCH(x.device(), global_avg_pool2d_forward, xc, y);
  record("GlobalAvgPool2dBackward", {x}, {y},
         [in_shape = x.shape(), channels_last](const Grads& g, const Needs&) -> Grads {
           Tensor gy = g[0].contiguous();
           Tensor gx = empty_in_format(in_shape, channels_last, gy.device());
           MT_DISPATCH(gy.device(), global_avg_pool2d_backward, gy, gx);
           return {gx};
         });
  return y;
}

}  // namespace mt::core
