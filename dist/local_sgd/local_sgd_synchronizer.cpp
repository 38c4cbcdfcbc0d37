#include "dist/local_sgd/local_sgd_synchronizer.h"

#include "core/error.h"
#include "dist/registry.h"

namespace mt::dist {

LocalSgdSynchronizer::LocalSgdSynchronizer(std::shared_ptr<ProcessGroup> group, LocalSgdOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  MT_CHECK(group_ != nullptr, "local SGD needs a process group");
}

void LocalSgdSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  check_replicas_agree(*group_, model, options_.config_text);
  make_replicas_identical(*group_, model, {}, options_.log);
  model_ = ModelVector(model, optimizer.params());
  optimizer_ = &optimizer;
  // No gradient-ready hooks: gradients never leave the rank.
}

void LocalSgdSynchronizer::show_local() {
  model_.show_local();
  rank_states_.forget();  // training goes on: they no longer describe the ranks
}

bool LocalSgdSynchronizer::end_iteration(optim::StepGuard& optimizer) {
  show_local();
  optimizer.step();  // this rank's gradient, this rank's optimizer state
  if (++steps_ % options_.period == 0)
    model_.average_over(*group_, "local SGD: averaging the model after step " + std::to_string(steps_));
  return true;
}

void LocalSgdSynchronizer::prepare_eval(layers::Module& model) {
  if (steps_ % options_.period == 0) return;  // just averaged: every rank holds the average
  model_.show_average(*group_, "local SGD: the world average for evaluation");
}

void LocalSgdSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  if (rank_states_.collected()) return;
  MT_CHECK(optimizer_ != nullptr, "internal: local SGD checkpoint before setup");
  rank_states_.collect(*group_, replica_state(model_, *optimizer_), "local SGD checkpoint state");
}

core::StateDict LocalSgdSynchronizer::state_dict() const {
  core::StateDict state = {{"local_sgd.steps", Tensor::from_vector(std::vector<int64_t>{steps_}, {1})}};
  rank_states_.append_to(state, "local_sgd.");
  return state;
}

void LocalSgdSynchronizer::load_state_dict(const core::StateDict& state) {
  MT_CHECK(optimizer_ != nullptr, "internal: local SGD load_state_dict before setup");
  // The model was loaded with the checkpoint's average and rank 0's optimizer state; the step
  // count places the next average, and each rank's own state replaces them.
  model_.drop_aside();
  rank_states_.forget();
  // A checkpoint of another algorithm has no steps: the periods start afresh.
  if (const auto steps = saved_int64(state, "local_sgd.steps")) {
    steps_ = *steps;
    restore_own_replica(state, "local_sgd.", *group_, model_, *optimizer_, options_.log);
  }
}

namespace {

void validate_local_sgd(const mintrain::DistConfig& d) { check_at_least("dist.local_sgd.period", d.local_sgd().period(), 1); }

std::unique_ptr<Synchronizer> make_local_sgd(const AlgorithmContext& c) {
  auto o = options_from<LocalSgdOptions>(c);
  o.period = c.dist.local_sgd().period();
  return std::make_unique<LocalSgdSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(local_sgd, {.validate = mt::dist::validate_local_sgd, .make = mt::dist::make_local_sgd})
