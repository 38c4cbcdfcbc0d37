// DS-Sync, divide and shuffle (docs/algorithms.md section 3; README.md): a local step on each
// rank's own gradient, then an average of the models inside the rank's group of the iteration
// (dssync_schedule.h), on that group's communicator. Evaluation shows the world average.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/dssync/dssync_schedule.h"
#include "dist/flat.h"
#include "dist/comm/process_group.h"
#include "dist/replicas.h"
#include "dist/synchronizer.h"
#include "dist/comm/topology.h"

namespace mt::dist {

struct DsSyncOptions : SynchronizerOptions {
  DsSyncScheduleOptions schedule;   // world_size is taken from the group
  int global_average_every = 0;     // > 0: every K-th iteration averages over the whole world
  int spread_every = 0;             // > 0: measure (and rank 0 logs) the spread every N iterations
  bool broadcast_initial_weights = true;  // false: keep each rank's own start (tests)
  bool measure_racks = false;       // racks timed at setup (topology.h) instead of given
};

class DsSyncSynchronizer final : public Synchronizer {
 public:
  DsSyncSynchronizer(std::shared_ptr<ProcessGroup> group, DsSyncOptions options);

  std::string name() const override { return "dssync/" + options_.schedule.type; }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  void prepare_checkpoint(layers::Module& model) override;

  // "dssync.step" (steps taken = the schedule position) and, when prepare_checkpoint() ran since
  // the last step (the trainer calls it before every checkpoint), on rank 0 "dssync.ranks" (world
  // size) and per rank r "dssync.rank<r>.local" (flat parameters + float32 buffers) and
  // "dssync.rank<r>.optim.<entry>" (that rank's optimizer state).
  core::StateDict state_dict() const override;
  // After the model and optimizer were loaded (the trainer's order; before setup it is kept and
  // applied at the end of setup): the step count; then this rank's own weights and optimizer
  // state when the checkpoint has them for this world size. Otherwise every rank keeps the
  // loaded average and rank 0's optimizer state, and rank 0 logs a note saying why. Per-rank
  // entries that do not fit this model are an Error naming the entry.
  void load_state_dict(const core::StateDict& state) override;

  const DsSyncSchedule& schedule() const { return *schedule_; }
  // Whether this rank's averaging group of the last step spanned racks (a flow over the uplink;
  // a global average is not counted), and in how many steps so far it did.
  bool crossed_last_step() const { return crossed_last_step_; }
  int64_t crossing_steps() const { return crossing_steps_; }
  int64_t steps() const { return step_; }
  // Collective over the world: RMS over ranks of ||x_r - mean x||_2 (parameters only).
  double measure_spread();

 private:
  void restore_local();
  void restore_state(const core::StateDict& state);

  std::shared_ptr<ProcessGroup> group_;
  DsSyncOptions options_;
  std::unique_ptr<DsSyncSchedule> schedule_;
  std::map<RankGroup, std::shared_ptr<ProcessGroup>> communicators_;  // my groups only
  std::vector<Tensor> params_;
  ModelVector model_;            // parameters and float32 buffers (batch-norm statistics)
  int64_t step_ = 0;             // optimizer steps taken = the schedule position
  bool crossed_last_step_ = false;
  int64_t crossing_steps_ = 0;
  optim::Optimizer* optimizer_ = nullptr;  // setup's: per-rank optimizer state for checkpoints
  // Between prepare_checkpoint and the next step: every rank's {"local", "optim.<entry>"}
  // (on rank 0, in rank order).
  RankStates replica_states_;
  bool set_up_ = false;
  std::optional<core::StateDict> pending_state_;  // loaded before setup
};

}  // namespace mt::dist
