#include "optim/registry.h"

#include <algorithm>
#include <tuple>

#include "core/strings.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mt::optim {

namespace {

// One optimizer of the named kind over `params`, with `weight_decay` in place of opt's.
std::unique_ptr<Optimizer> build_one(const std::string& name, std::vector<Tensor> params,
                                     const OptimizerOptions& opt, double weight_decay) {
  if (name == "sgd") {
    SgdOptions o;
    o.lr = opt.lr;
    o.momentum = opt.momentum;
    o.dampening = opt.dampening;
    o.nesterov = opt.nesterov;
    o.weight_decay = weight_decay;
    o.decoupled_weight_decay = opt.decoupled_weight_decay;
    return std::make_unique<SGD>(std::move(params), o);
  }
  // Only "adam" and "adamw" are left (build_optimizer checked the name).
  // A momentum given to Adam would otherwise be ignored without a word: its role is beta1's.
  MT_CHECK(opt.momentum == 0 && opt.dampening == 0 && !opt.nesterov, "optimizer '", name,
           "' takes no momentum, dampening or nesterov (got momentum ", opt.momentum, ", dampening ",
           opt.dampening, ", nesterov ", opt.nesterov, "); its moments are set by beta1 and beta2");
  AdamOptions o;
  o.lr = opt.lr;
  o.beta1 = opt.beta1;
  o.beta2 = opt.beta2;
  o.eps = opt.eps;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = name == "adamw" || opt.decoupled_weight_decay;
  return std::make_unique<Adam>(std::move(params), o);
}

// Optimizers of one kind side by side, each over a subset of the parameters (here: those with
// and those without weight decay, PyTorch's "parameter groups"). It acts as one optimizer over
// the original list: step() hands the current learning rate to each, and state entries are
// renamed between the groups' own numbering and the original parameter indices, so a
// checkpoint does not depend on how the parameters were grouped.
class ParamGroups : public Optimizer {
 public:
  struct Group {
    std::unique_ptr<Optimizer> opt;
    std::vector<size_t> index;  // original index of the group's i-th parameter
    std::string what;           // for messages
  };

  ParamGroups(std::vector<Tensor> params, double lr, std::vector<Group> groups)
      : Optimizer(std::move(params), lr), groups_(std::move(groups)), where_(params_.size()) {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t local = 0; local < groups_[g].index.size(); ++local)
        where_[groups_[g].index[local]] = {g, local};
  }

  void step() override {
    for (auto& g : groups_) {
      g.opt->set_lr(lr_);  // the trainer's schedule sets the rate on this object
      g.opt->step();
    }
  }

  core::StateDict state_dict() const override {
    std::vector<std::tuple<size_t, size_t, std::string, Tensor>> entries;  // index, order, name
    for (const auto& g : groups_) {
      for (auto& [entry, t] : g.opt->state_dict()) {
        std::string prefix;
        size_t local = 0;
        MT_CHECK(split_state_entry(entry, prefix, local) && local < g.index.size(),
                 "internal: optimizer state entry '", entry, "' does not end in a parameter index");
        entries.emplace_back(g.index[local], entries.size(), prefix + std::to_string(g.index[local]), t);
      }
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    core::StateDict out;
    for (auto& e : entries) out.emplace_back(std::move(std::get<2>(e)), std::move(std::get<3>(e)));
    return out;
  }

  void load_state_dict(const core::StateDict& state) override {
    std::vector<core::StateDict> per_group(groups_.size());
    for (const auto& [entry, t] : state) {
      std::string prefix;
      size_t idx = 0;
      if (!split_state_entry(entry, prefix, idx)) {
        per_group[0].emplace_back(entry, t);  // rejected there, with the valid forms named
        continue;
      }
      MT_CHECK(idx < params_.size(), "optimizer state: '", entry, "' but this optimizer has only ",
               params_.size(), " parameters; was it saved for another model?");
      const auto [g, local] = where_[idx];
      per_group[g].emplace_back(prefix + std::to_string(local), t);
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      try {
        groups_[g].opt->load_state_dict(per_group[g]);
      } catch (const core::Error& e) {
        MT_FAIL(e.what(), " [no_decay_1d: the ", groups_[g].what,
                " parameters form their own group; the numbers in this message count within it]");
      }
    }
  }

 private:
  std::vector<Group> groups_;
  std::vector<std::pair<size_t, size_t>> where_;  // original index -> (group, index in group)
};

}  // namespace

std::vector<std::string> optimizer_names() { return {"sgd", "adam", "adamw"}; }

std::unique_ptr<Optimizer> build_optimizer(const std::string& name, std::vector<Tensor> params,
                                           const OptimizerOptions& opt) {
  const auto names = optimizer_names();
  MT_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "unknown optimizer '", name,
           "'; valid optimizers: ", core::join(names));
  // Checked here too: with every parameter 1-d, no optimizer would see the value.
  MT_CHECK(opt.weight_decay >= 0, "optimizer '", name, "': weight_decay must be >= 0, got ", opt.weight_decay);
  if (!opt.no_decay_1d || opt.weight_decay == 0) return build_one(name, std::move(params), opt, opt.weight_decay);

  ParamGroups::Group decayed{nullptr, {}, "weight-decayed (dim() > 1)"};
  ParamGroups::Group undecayed{nullptr, {}, "1-d (no weight decay)"};
  std::vector<Tensor> decayed_params, undecayed_params;
  for (size_t i = 0; i < params.size(); ++i) {
    // An undefined tensor is left in a group for the optimizer to reject with its index.
    const bool one_d = params[i].defined() && params[i].dim() == 1;
    (one_d ? undecayed : decayed).index.push_back(i);
    (one_d ? undecayed_params : decayed_params).push_back(params[i]);
  }
  // All on one side: no grouping needed, and the indices are the original ones already.
  if (undecayed_params.empty()) return build_one(name, std::move(params), opt, opt.weight_decay);
  if (decayed_params.empty()) return build_one(name, std::move(params), opt, 0.0);

  decayed.opt = build_one(name, std::move(decayed_params), opt, opt.weight_decay);
  undecayed.opt = build_one(name, std::move(undecayed_params), opt, 0.0);
  std::vector<ParamGroups::Group> groups;
  groups.push_back(std::move(decayed));
  groups.push_back(std::move(undecayed));
  return std::make_unique<ParamGroups>(std::move(params), opt.lr, std::move(groups));
}

}  // namespace mt::optim
