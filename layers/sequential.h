// Sequential: runs its children in the order they were added, each one's output the next
// one's input. Children are named by position ("0", "1", ...), so a parameter is "2.weight".
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace mt::layers {

class Sequential : public Module {
 public:
  Sequential() = default;

  // Appends m and returns it, typed, so the caller can keep a handle:
  //   auto fc = seq.push_back(std::make_shared<Linear>(784, 10, gen));
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(modules_.size()), m);
    modules_.push_back(m);
    return m;
  }

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace mt::layers
