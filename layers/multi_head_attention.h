// Multi-head self-attention as in BERT (Vaswani et al. 2017): each token's query is compared
// with every token's key, the softmax of the scaled scores (padding keys masked out) weights the
// values, and this is done by `heads` independent heads of width hidden / heads whose results
// are concatenated and mixed by an output projection.
//
// The query, key and value projections are one fused Linear "qkv" with weight [3 * hidden,
// hidden] (rows: query, then key, then value; each block is head-major): one GEMM over the
// tokens instead of three, so the input is read once and the GEMM is three times wider, which
// matters most on a GPU where a [N, hidden] x [hidden, hidden] product leaves it under-used. A
// checkpoint with separate query/key/value matrices converts by stacking them.
#pragma once
#include <memory>

#include "core/random.h"
#include "layers/linear.h"
#include "layers/module.h"

namespace mt::layers {

class MultiHeadAttention : public Module {
 public:
  // Weights use Linear's default init (BERT redraws them); the attention-dropout generator is
  // seeded from gen.
  MultiHeadAttention(int64_t hidden, int64_t heads, float attention_dropout, core::Generator& gen);

  // x [B, S, hidden]; key_mask float32 [B, S] (1 = token, 0 = padding; undefined = no padding)
  // -> [B, S, hidden]. Padding keys get no attention weight, so a padded token's content never
  // reaches another position.
  Tensor forward(const Tensor& x, const Tensor& key_mask);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  std::string type_name() const override { return "MultiHeadAttention"; }

  int64_t hidden() const { return hidden_; }
  int64_t heads() const { return heads_; }
  const std::shared_ptr<Linear>& qkv() const { return qkv_; }
  const std::shared_ptr<Linear>& dense() const { return dense_; }

 private:
  int64_t hidden_, heads_;
  float attention_dropout_;
  core::Generator dropout_gen_;
  std::shared_ptr<Linear> qkv_, dense_;
};

}  // namespace mt::layers
