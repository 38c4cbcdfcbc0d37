// Stochastic gradient descent with momentum, Nesterov momentum and weight decay, with the
// semantics of torch.optim.SGD, so hyper-parameters from papers and PyTorch recipes carry over:
//
//   g = grad + wd * p                      (L2 weight decay; skipped when decoupled)
//   p = p * (1 - lr * wd)                  (decoupled weight decay, AdamW-style, instead)
//   buf = g                                (first step: no dampening, as PyTorch)
//   buf = momentum * buf + (1 - dampening) * g   (later steps)
//   g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
//
// On the CPU all of this is one fused loop per parameter: a single pass that reads the
// gradient, the momentum buffer and the weight and writes the buffer and the weight, instead of
// four or five separate tensor ops that each stream the whole parameter through memory.
#pragma once
#include <vector>

#include "optim/optimizer.h"

namespace mt::core::cuda {
struct SgdUpdate;  // core/kernels/cuda/sgd_update.h
}  // namespace mt::core::cuda

namespace mt::optim {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
};

class SGD : public Optimizer {
 public:
  // Throws Error for negative values, or Nesterov without momentum / with dampening.
  SGD(std::vector<Tensor> params, SgdOptions opt);

  void step() override;
  const SgdOptions& options() const { return opt_; }

  // "momentum.<i>" for every parameter i that has a momentum buffer (none before the first
  // step, and none ever when momentum is 0). The tensors are the live buffers, not copies.
  core::StateDict state_dict() const override;
  // Replaces the momentum buffers; names and shapes must match this optimizer's parameters.
  void load_state_dict(const core::StateDict& state) override;

 private:
  void step_cpu(size_t i, Tensor& param, const Tensor& grad);
  core::cuda::SgdUpdate update_constants() const;  // this step's lr, decay, momentum

  SgdOptions opt_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first update
};

}  // namespace mt::optim
