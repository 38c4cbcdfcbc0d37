#include "dist/synchronizer.h"

#include <vector>

namespace mt::dist {

void Synchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  // Route every parameter's grad-ready hook to on_gradient_ready with its index, so subclasses
  // see gradients in the order backward finalizes them.
  const auto& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].register_grad_ready_hook([this, i](core::Tensor& p) { on_gradient_ready(i, p); });
  }
  if (!gates_forward()) return;
  // Every module that owns parameters asks, before its forward, for each of them by its index
  // among the optimizer's parameters (tied weights are found where they are registered).
  std::vector<layers::Module*> modules = {&model};
  for (size_t m = 0; m < modules.size(); ++m)
    for (const auto& [name, child] : modules[m]->named_children()) modules.push_back(child.get());
  std::weak_ptr<bool> alive = alive_;
  for (layers::Module* module : modules) {
    std::vector<size_t> indices;
    for (const auto& [name, tensor] : module->own_parameters())
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].same(tensor)) indices.push_back(i);
    if (indices.empty()) continue;
    module->register_forward_pre_hook([this, alive, indices, params](layers::Module&) {
      if (alive.expired()) return;
      for (size_t i : indices) {
        core::Tensor p = params[i];
        before_forward_use(i, p);
      }
    });
  }
}

}  // namespace mt::dist
