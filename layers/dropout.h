// Dropout (Srivastava et al. 2014): in training, zeroes each element with probability p and
// scales the survivors by 1 / (1 - p), so the expected activation is unchanged and evaluation
// (where dropout is the identity) needs no rescaling.
//
// The layer owns its random generator, seeded at construction, so a model built from a seed
// drops the same units on every run. Its position is not part of the state dict: a resumed run
// draws different masks than an uninterrupted one would.
#pragma once
#include "core/random.h"
#include "layers/module.h"

namespace mt::layers {

class Dropout : public Module {
 public:
  explicit Dropout(float p, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  float p() const { return p_; }

 private:
  float p_;
  core::Generator gen_;
};

}  // namespace mt::layers
