#include "optim/registry.h"

#include "optim/sgd.h"

namespace mt::optim {

std::vector<std::string> optimizer_names() { return {"sgd"}; }

std::unique_ptr<Optimizer> build_optimizer(const std::string& name, std::vector<Tensor> params,
                                           const OptimizerOptions& opt) {
  if (name == "sgd") {
    SgdOptions o;
    o.lr = opt.lr;
    o.momentum = opt.momentum;
    o.dampening = opt.dampening;
    o.nesterov = opt.nesterov;
    o.weight_decay = opt.weight_decay;
    o.decoupled_weight_decay = opt.decoupled_weight_decay;
    return std::make_unique<SGD>(std::move(params), o);
  }
  std::string valid;
  for (const auto& n : optimizer_names()) valid += (valid.empty() ? "" : ", ") + n;
  MT_FAIL("unknown optimizer '", name, "'; valid optimizers: ", valid);
}

}  // namespace mt::optim
