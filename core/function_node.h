// The usual way an op records its backward: a Node whose backward formula is a lambda.
//
//   Tensor out = ...forward...;
//   record("MulBackward", {a, b}, {out},
//          [a = a.detach(), b = b.detach()](const Grads& g, const Needs& needs) -> Grads {
//            return {needs[0] ? g[0] * b : Tensor(), needs[1] ? g[0] * a : Tensor()};
//          });
//
// Save tensors detached (detach() shares memory but not the graph): a saved tensor that still
// pointed at this node would keep the graph alive forever. release_saved() drops the lambda,
// and with it everything it captured.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"

namespace mt::core {

using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;
using BackwardFn = std::function<Grads(const Grads& grads_of_outputs, const Needs& needs_input_grad)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override;
  void release_saved() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// Connects outputs to a FunctionNode when any input needs a gradient; no-op otherwise.
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn);

}  // namespace mt::core
