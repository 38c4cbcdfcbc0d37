// The autograd graph. The forward pass of every differentiable op creates a Node that knows
// how to turn the gradients of the op's outputs into gradients of its inputs, and links it to
// the nodes that produced those inputs (Edges). backward() (engine.cpp) walks this graph.
//
// Writing an op: compute the output with kernels, then
//   if (needs_grad({a, b})) {
//     auto node = std::make_shared<MulBackward>(); node->a = a; node->b = b;  // save what backward needs
//     connect(node, {a, b}, {out});
//   }
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "core/tensor.h"

namespace mt::core {

class Node;

// Where a gradient goes: input number `input_nr` of node `fn`. A null fn means "no gradient
// needed" (the input did not require grad).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;

  virtual std::string name() const = 0;
  // grads[i] is the gradient w.r.t. output i (undefined if no gradient flowed there).
  // Returns one gradient per next edge, in order (undefined where none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grads) = 0;
  // Frees saved tensors after backward unless the graph is retained.
  virtual void release_saved() {}

  // Larger runs first among ready nodes: later ops' backward runs before earlier ones', which
  // gives the reverse-layer order data-parallel overlap relies on.
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs = 1;
  std::vector<Edge> next_edges;
  bool released = false;

 protected:
  uint64_t sequence_nr_;
};

// The node at the end of every path to a leaf that requires grad. The engine hands it each
// contribution as it arrives (add): summed into leaf.grad at once, so that the leaf's
// grad-contribution hooks see a tied weight's uses one by one; then, once the last has arrived,
// the engine runs it (apply) and it fires the leaf's grad-ready hooks: the gradient is final.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  // `remaining`: contributions still to come in this backward pass.
  void add(Tensor incoming, int remaining);
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
  bool received_ = false;  // a contribution arrived in this pass: the ready hooks fire
};

// True when grad mode is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// The edge a gradient for `t` must flow along (its grad_fn, its accumulator, or none).
Edge gradient_edge(const Tensor& t);

// Sets node->next_edges from the inputs and makes `node` the grad_fn of the outputs.
void connect(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
             const std::vector<Tensor>& outputs);

// Runs backward from `roots` with the given output gradients (engine.cpp).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

}  // namespace mt::core
