#include "layers/sequential.h"

namespace mt::layers {

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = m->forward(h);
  return h;
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), "Sequential: index ", i, " out of range for ", modules_.size(), " modules");
  return modules_[i];
}

}  // namespace mt::layers
