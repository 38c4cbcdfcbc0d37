#include "dist/synchronizer.h"

namespace mt::dist {

void Synchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  // Route every parameter's grad-ready hook to on_gradient_ready with its index, so subclasses
  // see gradients in the order backward finalizes them.
  const auto& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].register_grad_ready_hook([this, i](core::Tensor& p) { on_gradient_ready(i, p); });
  }
}

}  // namespace mt::dist
