#include "core/tensor.h"

#include <sstream>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/elementwise.h"
#include "core/ops/elementwise.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/elementwise.h"
#endif

#ifdef MT_WITH_CUDA
#include "core/cuda/cuda_memory.h"
#endif

namespace mt::core {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>()); }

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

// ---------------------------------------------------------------- factories

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) MT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(shape_numel(shape) * element_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor Tensor::zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::Float32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::Int64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

Tensor Tensor::scalar(float value) { return from_vector(std::vector<float>{value}, {}); }

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// ---------------------------------------------------------------- metadata

int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  MT_CHECK(d >= -nd && d < nd, "size(", d, ") of a ", nd, "-d tensor");
  return impl().shape[d < 0 ? d + nd : d];
}

bool Tensor::is_contiguous() const {
  const auto& sh = impl().shape;
  const auto& st = impl().strides;
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sh.size()) - 1; i >= 0; --i) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

void* Tensor::raw_data() const {
  const auto& s = impl().storage;
  if (!s || !s->data()) return nullptr;
  return static_cast<char*>(s->data()) + impl().offset * element_size(impl().dtype);
}

float Tensor::item() const {
  MT_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements");
  return to(Device::cpu()).to(DType::Float32).data<float>()[0];
}

int64_t Tensor::item_int() const {
  MT_CHECK(numel() == 1, "item_int() of a tensor with ", numel(), " elements");
  return to(Device::cpu()).to(DType::Int64).data<int64_t>()[0];
}

std::vector<float> Tensor::to_vector() const {
  const Tensor c = to(Device::cpu()).contiguous().to(DType::Float32);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

// ---------------------------------------------------------------- copies

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  MT_DISPATCH(device(), copy, *this, out);
  record("CloneBackward", {*this}, {out}, [](const Grads& g, const Needs&) -> Grads { return {g[0]}; });
  return out;
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
#ifdef MT_WITH_CUDA
  MT_CHECK(!target.is_cuda() || target.index < cuda_device_count(), "cannot move ", str(), " to ",
           target.str(), ": ", cuda_device_count(),
           " CUDA device(s) visible (check nvidia-smi and CUDA_VISIBLE_DEVICES, or use \"cpu\")");
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), target);
  cuda::copy_between_devices(src, out);
  record("ToDeviceBackward", {*this}, {out}, [from = device()](const Grads& g, const Needs&) -> Grads {
    return {g[0].to(from)};
  });
  return out;
#else
  MT_FAIL("cannot move ", str(), " to ", target.str(), ": this mintrain was built without CUDA");
#endif
}

Tensor Tensor::to(DType target) const {
  if (dtype() == target) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), target, device());
  MT_DISPATCH(device(), convert, src, out);
  return out;
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

// ---------------------------------------------------------------- views

namespace {
Shape infer_shape(const Shape& requested, int64_t numel) {
  Shape out = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, "reshape: cannot infer -1 in ",
             shape_str(requested), " for ", numel, " elements");
    out[infer] = numel / known;
  }
  MT_CHECK(shape_numel(out) == numel, "reshape: shape ", shape_str(requested), " does not hold ",
           numel, " elements");
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  Shape s = infer_shape(requested, numel());
  MT_CHECK(is_contiguous(), "view(", shape_str(requested), ") of a non-contiguous ", str(),
           "; use reshape()");
  Tensor out = make_view(*this, s, contiguous_strides(s), offset());
  record("ViewBackward", {*this}, {out}, [sx = shape()](const Grads& g, const Needs&) -> Grads {
    return {g[0].reshape(sx)};
  });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  return is_contiguous() ? view(requested) : clone().view(requested);
}

Tensor Tensor::flatten(int64_t start_dim) const {
  const int64_t nd = dim();
  if (start_dim < 0) start_dim += nd;
  MT_CHECK(start_dim >= 0 && start_dim <= nd, "flatten: start_dim out of range for ", str());
  Shape s(shape().begin(), shape().begin() + start_dim);
  s.push_back(std::accumulate(shape().begin() + start_dim, shape().end(), int64_t{1}, std::multiplies<>()));
  return reshape(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const int64_t nd = dim();
  if (d0 < 0) d0 += nd;
  if (d1 < 0) d1 += nd;
  MT_CHECK(d0 >= 0 && d0 < nd && d1 >= 0 && d1 < nd, "transpose(", d0, ", ", d1, ") of ", str());
  Shape sh = shape(), st = strides();
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(*this, sh, st, offset());
  record("TransposeBackward", {*this}, {out}, [d0, d1](const Grads& g, const Needs&) -> Grads {
    return {g[0].transpose(d0, d1)};
  });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  MT_CHECK(d >= 0 && d < nd, "narrow: dimension out of range for ", str());
  MT_CHECK(start >= 0 && length >= 0 && start + length <= shape()[d], "narrow(", d, ", ", start,
           ", ", length, ") out of range for ", str());
  Shape sh = shape();
  sh[d] = length;
  Tensor out = make_view(*this, sh, strides(), offset() + start * strides()[d]);
  record("NarrowBackward", {*this}, {out}, [sx = shape(), d, start, length](const Grads& g, const Needs&) -> Grads {
    Tensor full = Tensor::zeros(sx, g[0].dtype(), g[0].device());
    full.narrow(d, start, length).copy_(g[0]);
    return {full};
  });
  return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  MT_CHECK(d >= 0 && d < nd, "select: dimension out of range for ", str());
  MT_CHECK(index >= 0 && index < shape()[d], "select: index ", index, " out of range for ", str());
  Shape sh = shape(), st = strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, sh, st, offset() + index * strides()[d]);
  record("SelectBackward", {*this}, {out}, [sx = shape(), d, index](const Grads& g, const Needs&) -> Grads {
    Tensor full = Tensor::zeros(sx, g[0].dtype(), g[0].device());
    full.select(d, index).copy_(g[0]);
    return {full};
  });
  return out;
}

// ---------------------------------------------------------------- in-place (no autograd)

namespace {
void check_inplace(const Tensor& t, const char* op) {
  MT_CHECK(!(GradMode::enabled() && t.requires_grad()), op, " on ", t.str(),
           " that requires grad: in-place updates of parameters must run under NoGradGuard");
}
}  // namespace

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  MT_DISPATCH(device(), fill, *this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  MT_CHECK(src.numel() == numel() && src.dtype() == dtype(), "copy_: source ", src.str(),
           " does not match destination ", str());
  if (src.device() != device()) {
    Tensor moved = src.detach().contiguous().to(device());
    return copy_(moved);
  }
  Tensor s = src.shape() == shape() ? src : src.contiguous().view(shape());
  MT_DISPATCH(device(), copy, s, *this);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, float alpha) {
  check_inplace(*this, "add_");
  MT_CHECK(other.shape() == shape() && is_contiguous(), "add_: ", other.str(), " into ", str());
  MT_DISPATCH(device(), axpy, alpha, other, *this);
  return *this;
}

Tensor& Tensor::mul_(float factor) {
  check_inplace(*this, "mul_");
  MT_CHECK(is_contiguous(), "mul_ needs a contiguous tensor, got ", str());
  MT_DISPATCH(device(), scale, *this, factor);
  return *this;
}

// ---------------------------------------------------------------- autograd

Tensor& Tensor::set_requires_grad(bool value) {
  MT_CHECK(is_leaf() || value, "set_requires_grad(false) on a non-leaf tensor; use detach()");
  MT_CHECK(!value || dtype() == DType::Float32 || dtype() == DType::Float16 || dtype() == DType::BFloat16,
           "only floating-point tensors can require gradients, got ", str());
  impl().requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  MT_CHECK(!g.defined() || g.shape() == shape(), "set_grad: gradient ", g.str(), " for ", str());
  impl().grad = g.impl_ptr();
}

void Tensor::zero_grad() { impl().grad.reset(); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  Tensor g = gradient;
  if (!g.defined()) {
    MT_CHECK(numel() == 1, "backward() without a gradient needs a one-element tensor (a loss), got ",
             str());
    g = Tensor::ones(shape(), dtype(), device());
  }
  MT_CHECK(g.shape() == shape(), "backward: gradient ", g.str(), " for ", str());
  run_backward({*this}, {g}, retain_graph);
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  MT_CHECK(is_leaf() && requires_grad(),
           "grad-ready hooks attach to leaf tensors that require grad (parameters), got ", str());
  impl().grad_ready_hooks.push_back(std::move(hook));
}

void Tensor::register_grad_contribution_hook(GradContributionHook hook) const {
  MT_CHECK(is_leaf() && requires_grad(),
           "grad-contribution hooks attach to leaf tensors that require grad (parameters), got ", str());
  impl().grad_contribution_hooks.push_back(std::move(hook));
}

void Tensor::clear_grad_hooks() const {
  impl().grad_ready_hooks.clear();
  impl().grad_contribution_hooks.clear();
}

}  // namespace mt::core
