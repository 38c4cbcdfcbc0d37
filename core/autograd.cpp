#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/ops/elementwise.h"

namespace mt::core {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }
}  // namespace

Node::Node() : sequence_nr_(next_sequence_nr++) {}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  // Run as soon as ready: the hook should fire the moment a gradient is final.
  sequence_nr_ = std::numeric_limits<uint64_t>::max();
}

void AccumulateGrad::add(Tensor incoming, int remaining) {
  if (!incoming.defined()) return;
  Tensor leaf(leaf_);
  MT_CHECK(incoming.shape() == leaf_->shape, "internal: gradient of shape ",
           shape_str(incoming.shape()), " for a parameter of shape ", shape_str(leaf_->shape));
  NoGradGuard no_grad;
  if (!leaf_->grad) {
    // Steal the buffer when nobody else can see it; otherwise copy, so that later in-place
    // accumulation cannot change another tensor.
    bool exclusive = incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1 &&
                     incoming.is_contiguous() && incoming.offset() == 0;
    leaf_->grad = exclusive ? incoming.impl_ptr() : incoming.detach().clone().impl_ptr();
  } else {
    Tensor(leaf_->grad).add_(incoming);
  }
  received_ = true;
  for (auto& hook : leaf_->grad_contribution_hooks) hook(leaf, incoming, remaining);
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>& grads) {
  // A root's gradient comes through the buffer; every other contribution came through add().
  if (!grads.empty() && grads[0].defined()) add(std::move(grads[0]), 0);
  if (!grads.empty()) grads[0] = Tensor();
  if (!received_) return {};
  received_ = false;
  Tensor leaf(leaf_);
  for (auto& hook : leaf_->grad_ready_hooks) hook(leaf);
  return {};
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  return GradMode::enabled() && std::any_of(inputs.begin(), inputs.end(), wants_grad);
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  return GradMode::enabled() && std::any_of(inputs.begin(), inputs.end(), wants_grad);
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  TensorImpl* impl = t.unsafe_impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  // A leaf: every use shares one accumulator so the gradient is summed before the hook fires.
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

void connect(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
             const std::vector<Tensor>& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const auto& in : inputs) node->next_edges.push_back(gradient_edge(in));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl* o = outputs[i].unsafe_impl();
    o->grad_fn = node;
    o->output_nr = static_cast<uint32_t>(i);
    o->requires_grad = true;
  }
}

}  // namespace mt::core
