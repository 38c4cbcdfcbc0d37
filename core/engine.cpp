// The backward engine: runs the graph's nodes so that each runs once, after every node that
// sends it a gradient has run, and prefers later-created nodes among those ready.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/op_profile.h"
#include "core/ops/elementwise.h"

namespace mt::core {

namespace {

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Number of edges pointing at each node reachable from the roots.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  std::vector<Node*> stack(seen.begin(), seen.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      deps[next] += 1;
      if (seen.insert(next).second) stack.push_back(next);
    }
  }
  return deps;
}

void accumulate_into(std::vector<Tensor>& buffer, uint32_t slot, Tensor grad) {
  if (!grad.defined()) return;
  // Out of place: the buffered gradient may be shared with another consumer.
  buffer[slot] = buffer[slot].defined() ? add(buffer[slot], grad) : std::move(grad);
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  MT_CHECK(roots.size() == grads.size(), "internal: backward needs one gradient per root");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  std::vector<std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> root_nodes;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  for (size_t i = 0; i < roots.size(); ++i) {
    MT_CHECK(roots[i].requires_grad(),
             "backward() on a tensor that does not require grad: no parameter contributed to it "
             "(did you compute it under NoGradGuard or forget set_requires_grad?)");
    Edge e = gradient_edge(roots[i]);
    Node* n = e.fn.get();
    keep_alive.push_back(e.fn);
    auto& buf = buffers[n];
    if (buf.empty()) buf.resize(n->num_outputs);
    accumulate_into(buf, e.input_nr, grads[i]);
    root_nodes.push_back(n);
  }

  auto deps = count_dependencies(root_nodes);
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  std::unordered_map<Node*, bool> queued;
  for (Node* r : root_nodes) {
    if (deps[r] == 0 && !queued[r]) { queued[r] = true; ready.push(r); }
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    MT_CHECK(!node->released, "backward through the graph a second time (", node->name(),
             "): its saved tensors were freed after the first backward; pass retain_graph=true "
             "to the first backward() if you need to call it twice");
    std::vector<Tensor> in = std::move(buffers[node]);
    buffers.erase(node);
    in.resize(node->num_outputs);
    std::vector<Tensor> out;
    {
      const std::string name = op_profiling() ? node->name() : std::string();
      ProfileScope scope(name);
      out = node->apply(in);
    }
    if (!retain_graph) {
      node->release_saved();
      if (!dynamic_cast<AccumulateGrad*>(node)) node->released = true;
    }
    MT_CHECK(out.size() == node->next_edges.size() || node->next_edges.empty(), "internal: ",
             node->name(), " returned ", out.size(), " gradients for ", node->next_edges.size(),
             " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      const int remaining = --deps[next];
      if (auto* acc = dynamic_cast<AccumulateGrad*>(next)) {
        acc->add(std::move(out[i]), remaining);  // into leaf.grad now, not buffered till the last
      } else {
        auto& buf = buffers[next];
        if (buf.empty()) buf.resize(next->num_outputs);
        accumulate_into(buf, e.input_nr, std::move(out[i]));
      }
      if (remaining == 0) ready.push(next);
    }
  }
}

}  // namespace mt::core
