#include "layers/module.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/grad_mode.h"
#include "core/strings.h"

namespace mt::layers {

namespace {

// Tied weights (one tensor registered under two names) must reach the optimizer once, or it
// would be updated twice per step.
NamedTensors unique_tensors(const NamedTensors& all) {
  NamedTensors out;
  std::set<const core::TensorImpl*> seen;
  for (const auto& [name, t] : all)
    if (seen.insert(t.unsafe_impl()).second) out.emplace_back(name, t);
  return out;
}

// Moves t's data to `device` without changing its identity: every handle to it (the layer's
// member, the optimizer's list, autograd hooks) sees the moved tensor.
void move_in_place(const Tensor& t, core::Device device) {
  if (t.device() == device) return;
  Tensor moved = t.detach().contiguous().to(device);
  core::TensorImpl* impl = t.unsafe_impl();
  impl->storage = moved.storage();
  impl->offset = moved.offset();
  impl->strides = moved.strides();
  if (impl->grad) {
    Tensor g = Tensor(impl->grad).detach().contiguous().to(device);
    impl->grad = g.impl_ptr();
  }
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  MT_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": ", what, " name '",
           name, "' is invalid; names must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& entry) { return entry.first == name; });
  };
  MT_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name(), ": the name '", name,
           "' is already registered; give the ", what, " another name");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name, "parameter");
  MT_CHECK(t.defined(), type_name(), ": parameter '", name, "' is an undefined tensor");
  // A parameter is a leaf the optimizer owns: cut any history it was computed with.
  if (!t.is_leaf()) t = t.detach();
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  MT_CHECK(t.defined(), type_name(), ": buffer '", name, "' is an undefined tensor");
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out) const {
  for (const auto& [name, t] : parameters ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", true, all);
  return unique_tensors(all);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors all;
  collect("", false, all);
  return unique_tensors(all);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

core::StateDict Module::state_dict() const {
  // Every name, tied or not, so a checkpoint loads into a model that unties them.
  core::StateDict out;
  collect("", true, out);
  collect("", false, out);
  return out;
}

void Module::load_state_dict(const core::StateDict& dict, bool strict) {
  const core::StateDict own = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : dict) {
    MT_CHECK(given.emplace(name, &t).second, "load_state_dict: the state dict has '", name, "' twice");
  }
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
    } else if (it->second->shape() != t.shape()) {
      mismatched.push_back(name + " (state dict " + core::shape_str(it->second->shape()) + ", model " +
                           core::shape_str(t.shape()) + ")");
    }
  }
  for (const auto& [name, t] : dict)
    if (!own_names.count(name)) unexpected.push_back(name);

  // Check everything before copying anything: a failed load leaves the model as it was.
  MT_CHECK(mismatched.empty(), "load_state_dict into ", type_name(), ": shape mismatch for ",
           core::join(mismatched), ". The state dict was saved from a differently configured model "
           "(check model name, num_classes, in_channels, image_size)");
  if (strict) {
    std::string problems;
    if (!missing.empty()) problems += "missing from the state dict: " + core::join(missing) + ". ";
    if (!unexpected.empty()) problems += "unexpected in the state dict: " + core::join(unexpected) + ". ";
    MT_CHECK(problems.empty(), "load_state_dict into ", type_name(), " (strict): ", problems,
             "Was it saved from another model? Load with strict = false to take only the names that match");
  }

  core::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor src = it->second->detach();
    if (src.dtype() != t.dtype()) src = src.to(t.dtype());  // e.g. a float num_batches_tracked
    Tensor(t).copy_(src);
  }
}

void Module::to(core::Device device) {
  for (const auto& [name, t] : named_parameters()) move_in_place(t, device);
  for (const auto& [name, t] : named_buffers()) move_in_place(t, device);
}

std::string Module::summary() const {
  std::ostringstream os;
  const NamedTensors params = named_parameters();
  size_t width = 4;
  for (const auto& [name, t] : params) width = std::max(width, name.size());
  os << type_name() << ": " << num_parameters() << " parameters in " << params.size() << " tensors\n";
  for (const auto& [name, t] : params)
    os << "  " << std::left << std::setw(static_cast<int>(width)) << name << "  "
       << std::setw(18) << core::shape_str(t.shape()) << " " << t.numel() << "\n";
  const NamedTensors buffers = named_buffers();
  if (!buffers.empty()) os << "  (+ " << buffers.size() << " buffers: running statistics etc.)\n";
  return os.str();
}

}  // namespace mt::layers
