#include "core/ops/elementwise.h"

#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/elementwise.h"
#include "core/memory_format.h"
#include "core/ops/reduction.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/elementwise.h"
#endif

namespace mt::core {

namespace {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t i = 0; i < nd; ++i) {
    int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_float_pair(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.dtype() == DType::Float32 && b.dtype() == DType::Float32, op,
           ": expects float32 tensors, got ", a.str(), " and ", b.str());
  MT_CHECK(a.device() == b.device(), op, ": tensors on different devices (", a.str(), ", ",
           b.str(), ")");
}

Tensor binary_forward(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  check_float_pair(name, a, b);
  // Two channels-last operands of one shape (a residual add) give a channels-last result.
  Tensor out = keeps_channels_last(a) && keeps_channels_last(b) && a.shape() == b.shape()
                   ? empty_channels_last(a.shape(), a.device())
                   : Tensor::empty(broadcast_shapes(a.shape(), b.shape()), DType::Float32, a.device());
  MT_DISPATCH(a.device(), binary, op, a, b, out);
  return out;
}

Tensor unary_forward(UnaryOp op, const Tensor& x) {
  MT_CHECK(x.dtype() == DType::Float32, "elementwise op expects float32, got ", x.str());
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::Float32, x.device());
  MT_DISPATCH(x.device(), unary, op, xc, out);
  return out;
}

Tensor scalar_forward(BinaryOp op, const Tensor& x, float s) {
  MT_CHECK(x.dtype() == DType::Float32, "elementwise op expects float32, got ", x.str());
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::Float32, x.device());
  MT_DISPATCH(x.device(), binary_scalar, op, xc, s, out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("add", BinaryOp::Add, a, b);
  record("AddBackward", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& n) -> Grads {
    return {n[0] ? sum_to(g[0], sa) : Tensor(), n[1] ? sum_to(g[0], sb) : Tensor()};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, b);
  record("SubBackward", {a, b}, {out}, [sa = a.shape(), sb = b.shape()](const Grads& g, const Needs& n) -> Grads {
    return {n[0] ? sum_to(g[0], sa) : Tensor(), n[1] ? sum_to(neg(g[0]), sb) : Tensor()};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, b);
  record("MulBackward", {a, b}, {out}, [a = a.detach(), b = b.detach()](const Grads& g, const Needs& n) -> Grads {
    return {n[0] ? sum_to(mul(g[0], b), a.shape()) : Tensor(),
            n[1] ? sum_to(mul(g[0], a), b.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("div", BinaryOp::Div, a, b);
  record("DivBackward", {a, b}, {out},
         [a = a.detach(), b = b.detach(), out = out.detach()](const Grads& g, const Needs& n) -> Grads {
           return {n[0] ? sum_to(div(g[0], b), a.shape()) : Tensor(),
                   n[1] ? sum_to(neg(div(mul(g[0], out), b)), b.shape()) : Tensor()};
         });
  return out;
}

Tensor add(const Tensor& a, float s) {
  Tensor out = scalar_forward(BinaryOp::Add, a, s);
  record("AddScalarBackward", {a}, {out}, [](const Grads& g, const Needs&) -> Grads { return {g[0]}; });
  return out;
}

Tensor mul(const Tensor& a, float s) {
  Tensor out = scalar_forward(BinaryOp::Mul, a, s);
  record("MulScalarBackward", {a}, {out}, [s](const Grads& g, const Needs&) -> Grads { return {mul(g[0], s)}; });
  return out;
}

Tensor pow(const Tensor& a, float p) {
  MT_CHECK(a.dtype() == DType::Float32, "pow expects float32, got ", a.str());
  Tensor ac = a.contiguous();
  Tensor out = Tensor::empty(a.shape(), DType::Float32, a.device());
  MT_DISPATCH(a.device(), pow_scalar, ac, p, out);
  record("PowBackward", {a}, {out}, [a = a.detach(), p](const Grads& g, const Needs&) -> Grads {
    return {mul(mul(g[0], pow(a, p - 1.0f)), p)};
  });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Neg, x);
  record("NegBackward", {x}, {out}, [](const Grads& g, const Needs&) -> Grads { return {neg(g[0])}; });
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Exp, x);
  record("ExpBackward", {x}, {out}, [out = out.detach()](const Grads& g, const Needs&) -> Grads {
    return {mul(g[0], out)};
  });
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Log, x);
  record("LogBackward", {x}, {out}, [x = x.detach()](const Grads& g, const Needs&) -> Grads { return {div(g[0], x)}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Sqrt, x);
  record("SqrtBackward", {x}, {out}, [out = out.detach()](const Grads& g, const Needs&) -> Grads {
    return {div(mul(g[0], 0.5f), out)};
  });
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Abs, x);
  record("AbsBackward", {x}, {out}, [x = x.detach()](const Grads& g, const Needs&) -> Grads {
    return {mul(g[0], unary_forward(UnaryOp::Sign, x))};
  });
  return out;
}

Tensor square(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Square, x);
  record("SquareBackward", {x}, {out}, [x = x.detach()](const Grads& g, const Needs&) -> Grads {
    return {mul(mul(g[0], x), 2.0f)};
  });
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Tanh, x);
  record("TanhBackward", {x}, {out}, [y = out.detach()](const Grads& g, const Needs&) -> Grads {
    return {mul(g[0], add(mul(square(y), -1.0f), 1.0f))};  // 1 - y^2
  });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::Sigmoid, x);
  record("SigmoidBackward", {x}, {out}, [y = out.detach()](const Grads& g, const Needs&) -> Grads {
    return {mul(g[0], mul(y, add(mul(y, -1.0f), 1.0f)))};  // y (1 - y)
  });
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  MT_CHECK(static_cast<int64_t>(shape.size()) >= x.dim(), "expand: cannot expand ",
           shape_str(x.shape()), " to fewer dimensions ", shape_str(shape));
  const int64_t nd = static_cast<int64_t>(shape.size()), lead = nd - x.dim();
  Shape strides(nd, 0);
  for (int64_t d = lead; d < nd; ++d) {
    int64_t sx = x.shape()[d - lead];
    MT_CHECK(sx == shape[d] || sx == 1, "expand: cannot expand ", shape_str(x.shape()), " to ",
             shape_str(shape));
    strides[d] = sx == 1 ? 0 : x.strides()[d - lead];
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  record("ExpandBackward", {x}, {out}, [sx = x.shape()](const Grads& g, const Needs&) -> Grads {
    return {sum_to(g[0], sx)};
  });
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  MT_CHECK(lead >= 0, "sum_to: cannot reduce ", shape_str(g.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  Tensor r = sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

}  // namespace mt::core
