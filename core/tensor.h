// Tensor: a typed, shaped, strided view of a Storage, plus the autograd bookkeeping that lets
// backward() find its way from a result to the leaves that produced it.
//
// A Tensor is a cheap handle (a shared pointer to TensorImpl): copying a Tensor shares data.
// Use clone() for a deep copy. Views (reshape of a contiguous tensor, transpose, narrow,
// select) share storage with their base.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"

namespace mt::core {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);
// The elements before dimension `dim` and after it: a tensor seen as [outer, size(dim), inner].
inline int64_t outer_size(const Shape& s, int64_t dim) {
  return std::accumulate(s.begin(), s.begin() + dim, int64_t{1}, std::multiplies<>());
}
inline int64_t inner_size(const Shape& s, int64_t dim) {
  return std::accumulate(s.begin() + dim + 1, s.end(), int64_t{1}, std::multiplies<>());
}

class Node;
class Tensor;

// Called once per backward pass when a leaf's gradient is final (all contributions summed).
// The distributed module starts a parameter's gradient communication from here.
using GradReadyHook = std::function<void(Tensor& leaf)>;
// Called for each contribution to a leaf's gradient as backward delivers it (a leaf used k times
// in forward gets k), after it was summed into leaf.grad; `remaining` counts those still to come
// in this pass (0: this was the last, the grad-ready hooks fire next). A tied weight's uses thus
// reach the communication one by one (the parameter server's split, dist/ps_synchronizer.h).
// The contribution may be leaf.grad itself, which later contributions change: copy what you keep.
using GradContributionHook = std::function<void(Tensor& leaf, const Tensor& contribution, int remaining)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::Float32;

  // Autograd.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;      // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;         // the node that produced this tensor (null for leaves)
  uint32_t output_nr = 0;                // which output of grad_fn this is
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad node, shared by its uses
  std::vector<GradReadyHook> grad_ready_hooks;
  std::vector<GradContributionHook> grad_contribution_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- Factories (new, owned memory) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
                     Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
  static Tensor scalar(float value);
  static Tensor zeros_like(const Tensor& t);

  // ---- Metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage ? impl().storage->device() : Device::cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  int64_t offset() const { return impl().offset; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string str() const;  // "float32[64, 1, 28, 28] on cpu"

  // ---- Data access (CPU; checks the element type) ----
  template <typename T>
  T* data() const {
    MT_CHECK(dtype_of<T>::value == dtype(), "tensor holds ", dtype_name(dtype()), ", asked for ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  float item() const;                 // the single value of a one-element float tensor
  int64_t item_int() const;           // the single value of a one-element int64 tensor
  std::vector<float> to_vector() const;  // copies a float tensor to the host, in logical order

  // ---- Copies and conversions ----
  Tensor contiguous() const;  // self when already contiguous, else a differentiable copy
  Tensor clone() const;       // always a new contiguous copy (differentiable)
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;  // not differentiable
  Tensor detach() const;      // shares storage, cut from the graph

  // ---- Views (differentiable; share storage where possible) ----
  Tensor view(const Shape& shape) const;     // requires a contiguous tensor; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;

  // ---- In-place updates, outside autograd (optimizers, initializers, loaders) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // same numel; converts nothing
  Tensor& add_(const Tensor& other, float alpha = 1.0f);  // this += alpha * other, same shape
  Tensor& mul_(float factor);

  // ---- Autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool value);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient (the next backward allocates a fresh one)
  // Backpropagates from this tensor. Without `gradient` the tensor must hold one element.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  void register_grad_ready_hook(GradReadyHook hook) const;
  void register_grad_contribution_hook(GradContributionHook hook) const;
  // Drops both kinds of hooks: a synchronizer replaced mid-run (dist/auto) takes its own away.
  void clear_grad_hooks() const;

  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  TensorImpl& impl() const {
    MT_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Makes a tensor that views `base`'s storage with another shape/strides/offset (no autograd).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace mt::core
