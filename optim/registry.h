// Optimizers by name, so a run config can say optimizer: "sgd" and the trainer need not know
// the concrete classes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace mt::optim {

// The union of every registered optimizer's settings; each uses the fields it knows about.
struct OptimizerOptions {
  double lr = 0.1;
  double momentum = 0.0;     // SGD
  double dampening = 0.0;    // SGD
  bool nesterov = false;     // SGD
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // SGD and "adam" (= AdamW); "adamw" always decouples
  double beta1 = 0.9;        // Adam, AdamW
  double beta2 = 0.999;      // Adam, AdamW
  double eps = 1e-8;         // Adam, AdamW
  // Parameters with dim() == 1 (biases, normalization scales and shifts) get weight_decay 0;
  // the others get weight_decay. Any optimizer. State dict entry names keep the parameters'
  // own indices, so a checkpoint loads with or without this flag.
  bool no_decay_1d = false;
};

// "sgd", "adam", "adamw"; an unknown name is an Error that lists the valid ones, and so is an
// SGD-only setting (momentum, dampening, nesterov) given to Adam.
std::unique_ptr<Optimizer> build_optimizer(const std::string& name, std::vector<Tensor> params,
                                           const OptimizerOptions& opt);
std::vector<std::string> optimizer_names();

}  // namespace mt::optim
