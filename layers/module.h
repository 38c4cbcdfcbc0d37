// Module: the unit models are built from. A module owns named parameters (tensors that
// require grad and that the optimizer updates), named buffers (state that is saved but not
// trained, like batch-norm running statistics) and named child modules. Names are dotted
// paths ("layer1.0.conv1.weight") in registration order, the same on every process, which is
// what state dicts and the distributed module rely on.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/serialize.h"
#include "core/tensor.h"

namespace mt::layers {

using core::Tensor;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual std::string type_name() const = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  NamedTensors named_parameters() const;  // recursive, dotted names
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  int64_t num_parameters() const;  // total elements

  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters then buffers, dotted names. load_state_dict copies values in place (shapes
  // must match); with strict, missing or unexpected names are errors that list them.
  core::StateDict state_dict() const;
  void load_state_dict(const core::StateDict& dict, bool strict = true);

  void to(core::Device device);  // moves parameters and buffers

  // This module's own parameters (not its children's), in registration order.
  const NamedTensors& own_parameters() const { return params_; }
  // Called with this module just before its forward reads its own parameters. A data-parallel
  // algorithm that updates parameters while the next forward already runs (ByteScheduler) waits
  // there for this layer's update only. Modules that own parameters call
  // run_forward_pre_hooks() first thing in forward.
  void register_forward_pre_hook(std::function<void(Module&)> hook) { pre_hooks_.push_back(std::move(hook)); }
  std::string summary() const;   // one line per parameter: name, shape

 protected:
  void run_forward_pre_hooks() {
    for (auto& hook : pre_hooks_) hook(*this);
  }
  Tensor& register_parameter(const std::string& name, Tensor t);  // sets requires_grad
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    check_new_name(name, "module");
    MT_CHECK(m != nullptr, type_name(), ": register_module('", name, "') got a null module");
    children_.emplace_back(name, m);
    return m;
  }

 private:
  // Names are path components: non-empty, no dots, unique within this module.
  void check_new_name(const std::string& name, const char* what) const;
  // Appends this module's (and its children's) tensors with `prefix` to out.
  void collect(const std::string& prefix, bool parameters, NamedTensors& out) const;

  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::function<void(Module&)>> pre_hooks_;
};

}  // namespace mt::layers
