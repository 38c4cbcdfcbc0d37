// Local SGD (docs/algorithms.md section 4; README.md): every rank steps alone, and every
// `period` steps the ranks replace their parameters and float32 buffers by the world's average.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"
#include "dist/flat.h"
#include "dist/replicas.h"
#include "dist/synchronizer.h"

namespace mt::dist {

struct LocalSgdOptions : SynchronizerOptions {
  int period = 4;             // K: steps between two averages (>= 1)
};

class LocalSgdSynchronizer final : public Synchronizer {
 public:
  LocalSgdSynchronizer(std::shared_ptr<ProcessGroup> group, LocalSgdOptions options);

  std::string name() const override { return "local_sgd/every " + std::to_string(options_.period); }
  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override { show_local(); }
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // Every rank's own weights and optimizer state go into the checkpoint: ranks differ between
  // averages, and their optimizer states always do.
  void prepare_checkpoint(layers::Module& model) override;

  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  int64_t steps() const { return steps_; }

 private:
  void show_local();

  std::shared_ptr<ProcessGroup> group_;
  LocalSgdOptions options_;
  ModelVector model_;  // what is averaged: parameters and float32 buffers
  optim::Optimizer* optimizer_ = nullptr;  // setup's: per-rank optimizer state for checkpoints
  RankStates rank_states_;                 // collected for the next checkpoint
  int64_t steps_ = 0;
};

}  // namespace mt::dist
