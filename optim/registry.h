// Optimizers by name, so a run config can say optimizer: "sgd" and the trainer need not know
// the concrete classes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace mt::optim {

struct OptimizerOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
};

// "sgd"; an unknown name is an Error that lists the valid ones.
std::unique_ptr<Optimizer> build_optimizer(const std::string& name, std::vector<Tensor> params,
                                           const OptimizerOptions& opt);
std::vector<std::string> optimizer_names();

}  // namespace mt::optim
