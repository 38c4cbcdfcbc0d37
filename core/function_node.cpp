#include "core/function_node.h"

namespace mt::core {

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>& grads) {
  MT_CHECK(fn_ != nullptr, "backward through ", name_,
           " a second time: pass retain_graph=true to the first backward()");
  // Formulas skip the gradients of inputs that do not need one (a frozen layer, the data).
  Needs needs(next_edges.size());
  for (size_t i = 0; i < next_edges.size(); ++i) needs[i] = next_edges[i].valid();
  return fn_(grads, needs);
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn) {
  if (!needs_grad(inputs)) return;
  connect(std::make_shared<FunctionNode>(name, std::move(fn)), inputs, outputs);
}

}  // namespace mt::core
