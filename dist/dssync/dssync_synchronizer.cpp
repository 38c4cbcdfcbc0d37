#include "dist/dssync/dssync_synchronizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/comm/subgroups.h"
#include "dist/registry.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

const std::string kRankPrefix = "dssync.";  // + "ranks", "rank<r>.<entry>" (replicas.h)

}  // namespace

DsSyncSynchronizer::DsSyncSynchronizer(std::shared_ptr<ProcessGroup> group, DsSyncOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  MT_CHECK(group_ != nullptr, "DS-Sync needs a process group");
  options_.schedule.world_size = group_->size();
  MT_CHECK(!options_.measure_racks || options_.schedule.rack_of.empty(),
           "set the racks (dist.dssync.rack / dist.dssync.ranks_per_rack) or dist.dssync.measure_racks, "
           "not both");
  MT_CHECK(!options_.measure_racks || options_.schedule.type != "random" || options_.schedule.cross_period == 1,
           "dist.dssync.measure_racks with dist.dssync.cross_period > 1 needs dist.dssync.schedule "
           "\"butterfly\"; the random schedule ignores racks");
  // Built here, not at setup: a bad schedule config fails before any communication.
  schedule_ = std::make_unique<DsSyncSchedule>(options_.schedule);
}

void DsSyncSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  optimizer_ = &optimizer;
  model_ = ModelVector(model, params_);

  check_replicas_agree(*group_, model, options_.config_text);
  if (options_.measure_racks) {
    // Every rank clusters the same allgathered times, so all get the same racks.
    options_.schedule.rack_of = measure_racks(*group_);
    schedule_ = std::make_unique<DsSyncSchedule>(options_.schedule);
    if (rank() == 0 && options_.log) {
      *options_.log << "DS-Sync: racks measured at start-up: " << join_ranks(options_.schedule.rack_of, " ") << '\n';
    }
  }
  // After the racks are known (measured or given): a needed broadcast crosses each uplink once.
  if (options_.broadcast_initial_weights)
    make_replicas_identical(*group_, model, options_.schedule.rack_of, options_.log);
  if (rank() == 0 && options_.log) *options_.log << schedule_->describe() << std::flush;

  // One communicator per group this rank belongs to, in the global order (see the header).
  for (const RankGroup& g : schedule_->distinct_groups()) {
    if (std::find(g.begin(), g.end(), rank()) == g.end()) continue;
    communicators_[g] = group_->subgroup(g);
  }
  // No grad-ready hooks: gradients stay local, nothing to start during backward.
  set_up_ = true;
  if (pending_state_) {
    const core::StateDict state = std::move(*pending_state_);
    pending_state_.reset();
    restore_state(state);
  }
}

void DsSyncSynchronizer::begin_iteration(int64_t iteration) { restore_local(); }

bool DsSyncSynchronizer::end_iteration(optim::StepGuard& optimizer) {
  restore_local();  // in case a caller evaluated without a begin_iteration after it
  {
    TimelineSpan span(options_.timeline.get(), "optimizer");
    optimizer.step();  // purely local: this rank's gradient, this rank's momentum
  }
  const int64_t t = step_;
  const auto start = Timeline::Clock::now();
  const bool global = options_.global_average_every > 0 && (t + 1) % options_.global_average_every == 0;
  std::string label;
  crossed_last_step_ = false;
  if (global) {
    model_.average_over(*group_, "DS-Sync global average at iteration " + std::to_string(t));
    label = "global average";
  } else {
    const RankGroup& g = schedule_->group_of(t, rank());
    const std::string members = join_ranks(g);
    label = "group {" + members + "}";
    crossed_last_step_ = schedule_->spans_racks(g);
    if (crossed_last_step_) ++crossing_steps_;
    if (g.size() >= 2) {
      model_.average_over(*communicators_.at(g), "DS-Sync average in group {" + members + "} at iteration " +
                                              std::to_string(t));
    }
  }
  if (options_.timeline) {
    // The group of this rank at every iteration, on the comm lane (a singleton group too, so
    // the trace shows the whole schedule).
    options_.timeline->add(label, Timeline::kComm, start, Timeline::Clock::now(),
                           "{\"iteration\":" + std::to_string(t) + ",\"crosses_racks\":" +
                               (schedule_->crosses_racks(schedule_->at(t)) ? "true" : "false") + "}");
  }
  ++step_;
  if (options_.spread_every > 0 && step_ % options_.spread_every == 0) {
    const double spread = measure_spread();
    if (rank() == 0 && options_.log) {
      *options_.log << "DS-Sync iteration " << step_ << ": model spread (RMS distance to the average) "
                    << spread << std::endl;
    }
  }
  return true;
}

double DsSyncSynchronizer::measure_spread() {
  core::NoGradGuard no_grad;
  // Parameters only: the buffers are statistics, not what the ranks learn.
  const int64_t n = total_numel(params_);
  if (n == 0) return 0.0;
  const core::Device device = params_[0].device();
  Tensor sum = Tensor::empty({n}, core::DType::Float32, device);
  int64_t off = 0;
  for (const auto& t : params_) {
    sum.narrow(0, off, t.numel()).copy_(t.contiguous().view({-1}));
    off += t.numel();
  }
  const std::vector<float> mine = sum.to_vector();
  finish(group_->allreduce(sum, ReduceOp::Sum), *group_, "DS-Sync spread measurement (sum of models)");
  const std::vector<float> total = sum.to_vector();
  double d2 = 0.0;
  const double inv = 1.0 / world_size();
  for (int64_t i = 0; i < n; ++i) {
    const double d = mine[i] - total[i] * inv;
    d2 += d * d;
  }
  // Mean over ranks of the squared distance, in double precision on the host.
  return std::sqrt(std::max(0.0, mean_over_ranks(*group_, d2)));
}

void DsSyncSynchronizer::prepare_eval(layers::Module& model) {
  model_.show_average(*group_, "DS-Sync world average for evaluation");
}

void DsSyncSynchronizer::prepare_checkpoint(layers::Module& model) {
  prepare_eval(model);
  // Not trained yet (nothing differs between ranks), or already collected for this state.
  if (!model_.showing_average() || replica_states_.collected()) return;
  MT_CHECK(optimizer_ != nullptr, "internal: DS-Sync checkpoint before setup");
  replica_states_.collect(*group_, replica_state(model_, *optimizer_), "DS-Sync checkpoint state");
}

void DsSyncSynchronizer::restore_local() {
  if (!model_.showing_average()) return;
  model_.show_local();
  replica_states_.forget();  // training goes on: they no longer describe the ranks
}

core::StateDict DsSyncSynchronizer::state_dict() const {
  core::StateDict state = {{"dssync.step", Tensor::from_vector(std::vector<int64_t>{step_}, {1})}};
  replica_states_.append_to(state, kRankPrefix);
  return state;
}

void DsSyncSynchronizer::load_state_dict(const core::StateDict& state) {
  if (!set_up_) {
    // The step now (steps() reflects it); this rank's weights go into the tensors that setup
    // brings, so the rest waits for setup.
    if (const auto step = saved_int64(state, "dssync.step")) step_ = *step;
    pending_state_ = state;
    return;
  }
  restore_state(state);
}

void DsSyncSynchronizer::restore_state(const core::StateDict& state) {
  const std::optional<int64_t> step = saved_int64(state, "dssync.step");
  // No step: a checkpoint of another algorithm (S-SGD); the schedule starts from its beginning,
  // which is as good as any position for replicas that all start equal.
  if (!step) return;
  step_ = *step;
  if (restore_own_replica(state, kRankPrefix, *group_, model_, *optimizer_, options_.log)) replica_states_.forget();
}

namespace {

void validate_dssync(const mintrain::DistConfig& d) {
  const mintrain::DssyncConfig& s = d.dssync();
  check_at_least("dist.dssync.group_size", s.group_size(), 2);
  check_at_least("dist.dssync.cross_period", s.cross_period(), 1);
  check_at_least("dist.dssync.cross_ranks_per_rack", s.cross_ranks_per_rack(), 0);
  check_at_least("dist.dssync.ranks_per_rack", s.ranks_per_rack(), 0);
  for (int r : s.rack()) check_at_least("dist.dssync.rack values", r, 0);
  MT_CHECK(s.rack().empty() || s.ranks_per_rack() == 0,
           "set dist.dssync.rack (one id per rank) or dist.dssync.ranks_per_rack, not both");
  check_at_least("dist.dssync.global_average_every", s.global_average_every(), 0);
  check_at_least("dist.dssync.pool_size", s.pool_size(), 1);
  check_at_least("dist.dssync.spread_every", s.spread_every(), 0);
}

std::unique_ptr<Synchronizer> make_dssync(const AlgorithmContext& c) {
  const mintrain::DssyncConfig& s = c.dist.dssync();
  auto o = options_from<DsSyncOptions>(c);
  o.schedule.group_size = s.group_size();
  o.schedule.type = s.schedule();
  o.schedule.seed = s.seed();
  o.schedule.pool_size = s.pool_size();
  o.schedule.cross_period = s.cross_period();
  o.schedule.cross_ranks_per_rack = s.cross_ranks_per_rack();
  o.schedule.rack_of = s.ranks_per_rack() > 0 ? racks_of_consecutive(c.group->size(), s.ranks_per_rack())
                                              : std::vector<int>(s.rack().begin(), s.rack().end());
  o.global_average_every = s.global_average_every();
  o.spread_every = s.spread_every();
  o.measure_racks = s.measure_racks();
  return std::make_unique<DsSyncSynchronizer>(c.group, std::move(o));
}

}  // namespace
}  // namespace mt::dist

MT_REGISTER_ALGORITHM(dssync, {.validate = mt::dist::validate_dssync,
                                .make = mt::dist::make_dssync,
                                .names = {{"dssync.schedule", mt::dist::dssync_schedule_types()}}})
