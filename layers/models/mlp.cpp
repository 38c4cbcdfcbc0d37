#include "layers/models/mlp.h"

#include "core/ops/nn.h"

namespace mt::layers {

MLP::MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t num_classes, float dropout,
         core::Generator& gen) {
  int64_t width = in_features;
  for (size_t i = 0; i <= hidden.size(); ++i) {
    const int64_t next = i < hidden.size() ? hidden[i] : num_classes;
    MT_CHECK(next > 0, "MLP: layer sizes must be > 0, got hidden ", i, " = ", next);
    fcs_.push_back(register_module("fc" + std::to_string(i + 1), std::make_shared<Linear>(width, next, gen)));
    if (i < hidden.size() && dropout > 0.0f)
      drops_.push_back(register_module("drop" + std::to_string(i + 1), std::make_shared<Dropout>(dropout, gen.next_u64())));
    width = next;
  }
}

Tensor MLP::forward(const Tensor& x) {
  Tensor h = x.flatten(1);
  for (size_t i = 0; i < fcs_.size(); ++i) {
    h = fcs_[i]->forward(h);
    if (i + 1 == fcs_.size()) break;  // the classifier's logits go to the loss as they are
    h = core::relu(h);
    if (!drops_.empty()) h = drops_[i]->forward(h);
  }
  return h;
}

}  // namespace mt::layers
