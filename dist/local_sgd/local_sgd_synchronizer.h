// Local SGD ("average every K steps"; docs/algorithms.md): every rank steps its own optimizer on
// its own gradient, and every `period` steps the ranks replace their parameters and float32
// buffers (batch-norm statistics) by the world's average, one flattened allreduce. Nothing
// travels in between, so communication falls by a factor of K at the price of replicas that
// drift apart for K-1 steps. With K = 1 and plain SGD it is S-SGD: the average of N steps from
// the same weights is the step on the average gradient.
//
// Seams used: setup (agree, broadcast rank 0's weights), step (local step, then the average on
// every K-th), prepare_eval (show the world average, keep the local weights; begin_iteration puts
// them back, so evaluating does not change training). A checkpoint holds the average and the
// step count: a run resumed from one taken at an averaging step, with a stateless optimizer,
// continues exactly; elsewhere every rank continues from the average.
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dist/flat.h"
#include "dist/comm/process_group.h"
#include "dist/synchronizer.h"

namespace mt::dist {

struct LocalSgdOptions {
  int period = 4;             // K: steps between two averages (>= 1)
  std::string config_text;    // must be the same on every rank (checked at setup)
  std::ostream* log = nullptr;  // rank 0's start-up note (whether the weights were broadcast)
};

class LocalSgdSynchronizer final : public Synchronizer {
 public:
  LocalSgdSynchronizer(std::shared_ptr<ProcessGroup> group, LocalSgdOptions options);

  std::string name() const override { return "local_sgd/every " + std::to_string(options_.period); }
  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override { model_.show_local(); }
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;

  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  int64_t steps() const { return steps_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  LocalSgdOptions options_;
  ModelVector model_;  // what is averaged: parameters and float32 buffers
  int64_t steps_ = 0;
};

}  // namespace mt::dist
