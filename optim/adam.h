// Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019) with the semantics of
// torch.optim.Adam / torch.optim.AdamW, so recipes (BERT: AdamW, lr 1e-4, betas 0.9/0.999,
// wd 0.01) carry over. Per parameter, at its t-th update (t counts that parameter's own steps):
//
//   g = grad + wd * p                          (Adam: L2 weight decay, enters the moments)
//   p = p * (1 - lr * wd)                      (AdamW: decoupled weight decay, instead)
//   m = m + (1 - beta1) * (g - m)              (first moment, a running mean of g)
//   v = beta2 * v + (1 - beta2) * g * g        (second moment, a running mean of g^2)
//   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// The divisions by 1 - beta^t are the bias correction: m and v start at zero, so early on they
// underestimate the true moments by exactly that factor; without it the first steps would be
// sqrt(1 - beta2) / (1 - beta1) times too small or large (about 0.3x with the usual betas).
//
// As with SGD, the CPU step is one fused loop per parameter (OpenMP for large tensors) that
// reads gradient, moments and weight once and writes moments and weight once; CUDA parameters
// get the same arithmetic in one kernel (core/kernels/cuda/adam_update.cu).
#pragma once
#include <cstdint>
#include <vector>

#include "optim/optimizer.h"

namespace mt::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true = AdamW
};

class Adam : public Optimizer {
 public:
  // Throws Error for lr, eps or weight_decay < 0, betas outside [0, 1), an empty parameter
  // list or non-float32 parameters.
  Adam(std::vector<Tensor> params, AdamOptions opt);

  void step() override;
  const AdamOptions& options() const { return opt_; }
  // "Adam" or "AdamW", for messages.
  const char* name() const { return opt_.decoupled_weight_decay ? "AdamW" : "Adam"; }
  // Updates taken so far by parameter i (0 before its first gradient).
  int64_t steps_taken(size_t i) const { return steps_.at(i); }

  // For every parameter i updated at least once: "exp_avg.<i>" and "exp_avg_sq.<i>" (the live
  // moment tensors, on the parameter's device) and "step.<i>" (an int64 tensor of one element,
  // a fresh CPU copy of the step count).
  core::StateDict state_dict() const override;
  // Replaces all state. Each parameter needs all three entries or none; names, shapes and
  // dtypes must match this optimizer's parameters.
  void load_state_dict(const core::StateDict& state) override;

 private:
  void step_cpu(size_t i, Tensor& param, const Tensor& grad);

  AdamOptions opt_;
  std::vector<Tensor> exp_avg_;     // per parameter; undefined until its first update
  std::vector<Tensor> exp_avg_sq_;  // likewise
  std::vector<int64_t> steps_;      // per parameter, as PyTorch: frozen parameters do not count
};

}  // namespace mt::optim
