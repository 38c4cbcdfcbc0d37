// Embedding: a lookup table of learned vectors, one row per token (or position, or segment).
// Looking up ids is a row gather (core::embedding); the gradient touches only the rows that were
// looked up, summed when an id repeats.
#pragma once
#include "core/random.h"
#include "layers/module.h"

namespace mt::layers {

class Embedding : public Module {
 public:
  // Table [num_embeddings, dim] drawn from N(0, init_std) (BERT's convention, not PyTorch's
  // N(0, 1), which would dwarf the layer-normalized activations it is added to).
  Embedding(int64_t num_embeddings, int64_t dim, double init_std, core::Generator& gen);
  Tensor forward(const Tensor& ids) override;  // int64 ids of any shape -> [ids..., dim]
  std::string type_name() const override { return "Embedding"; }

  const Tensor& weight() const { return weight_; }
  int64_t dim() const { return dim_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

}  // namespace mt::layers
