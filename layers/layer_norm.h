// Layer normalization (Ba et al. 2016): each vector along the last dimension is normalized to
// zero mean and unit variance, then scaled and shifted by learned per-feature weight and bias.
// Unlike batch norm it needs no batch statistics, so training and evaluation compute the same
// thing and the sequence length and batch size do not matter.
#pragma once
#include "layers/module.h"

namespace mt::layers {

class LayerNorm : public Module {
 public:
  // weight starts at ones and bias at zeros: the layer begins as a pure normalization.
  explicit LayerNorm(int64_t dim, float eps = 1e-12f);
  Tensor forward(const Tensor& x) override;  // [..., dim] -> [..., dim]
  std::string type_name() const override { return "LayerNorm"; }

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  int64_t dim() const { return dim_; }
  float eps() const { return eps_; }

 private:
  int64_t dim_;
  float eps_;
  Tensor weight_, bias_;
};

}  // namespace mt::layers
