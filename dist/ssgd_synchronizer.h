// S-SGD (docs/algorithms.md section 1): every rank holds a full replica, computes gradients on its
// shard of the global batch, and the gradients are averaged (allreduce sum, then / N) before
// the same optimizer step everywhere. The schedule decides *when* each gradient travels:
//
//   BSP     one flattened allreduce after backward: no overlap, one start-up cost.
//   WFBP    each parameter's allreduce is enqueued from its grad-ready hook, so the last layers'
//           gradients travel while backward computes the first layers'.
//   FUSION  gradients are packed, in backward order, into buckets of at most bucket_cap_mb (the
//           first one first_bucket_cap_mb, so communication starts early); a bucket's allreduce
//           starts when its last gradient arrives.
//   MGWFBP  buckets from the merge plan (merge_plan.h): runs as BSP while it profiles the
//           backward time between consecutive grad-ready hooks (no message is sent during those
//           backward passes, so the times are the computation's own), then rank 0 computes the
//           plan from those times and T(M) = alpha + beta*M (timed at start-up, or the config's),
//           and broadcasts it.
//
// Collectives must be issued in the same order on every rank. The hooks fire in an order fixed
// by the autograd graph (the engine runs ready nodes by sequence number), and every rank builds
// the same graph, so the launch order agrees. After the first iteration FUSION (and after
// profiling MG-WFBP) rebuilds its buckets from rank 0's observed hook order, broadcast to all.
//
// What travels for a bucket is the communication hook's business (comm_hook.h): a dense
// allreduce / N by default, float16, or compressed with error feedback (compressing_hook.h), on
// every schedule. The process group runs collectives on its own thread (CPU) or stream (GPU): a
// grad-ready hook only copies a gradient into its bucket and hands a full bucket to the
// communication hook; backward goes on meanwhile. step() has the communication hook finish every
// message in launch order (each wait has the group's timeout and fails with an Error naming this
// rank and the bucket), copies the averages back, and steps the optimizer.
//
// Exact resume: which gradients share a message and in what order decides each element's
// summation order inside the ring allreduce (with 3+ ranks, (a+b)+c vs (b+c)+a), so a resumed run
// must pack exactly as the stopped one did. state_dict() holds those decisions — the bucket
// layout, FUSION's rebuild and MG-WFBP's profiling progress and plan — and load_state_dict()
// puts them back (see load_state_dict for what happens with another config); both live in
// ssgd_state.cpp, apart from the schedules.
//
// Gradient accumulation: with grad_accumulation_steps = k the trainer calls begin_iteration(it)
// once per micro-batch with the same `it`; the hooks do nothing on the first k-1 micro-batches
// (the gradients just sum up locally) and communicate on the k-th.
#pragma once
#include <chrono>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include <vector>

#include "core/device_marks.h"
#include "dist/bucket.h"
#include "dist/comm_hook.h"
#include "dist/merge_plan.h"
#include "dist/process_group.h"
#include "dist/synchronizer.h"
#include "dist/timeline.h"

namespace mt::dist {

struct SsgdOptions {
  Schedule schedule = Schedule::FUSION;
  double bucket_cap_mb = 25.0;        // FUSION: MiB per bucket
  double first_bucket_cap_mb = 1.0;   // FUSION: MiB of the first bucket
  int profile_iters = 5;              // MGWFBP: iterations profiled (after one warm-up iteration)
  double alpha = -1.0;                // MGWFBP: seconds per message; < 0 = measure at start-up
  double beta = -1.0;                 // MGWFBP: seconds per byte; < 0 = measure at start-up
  double gamma = 0.0;                 // MGWFBP, shared cores only: compute lost per message
  int grad_accumulation_steps = 1;
  std::string config_text;            // must be the same on every rank (checked at setup)
  std::shared_ptr<Timeline> timeline; // optional trace
  std::ostream* log = nullptr;        // rank 0's start-up notes (fitted cost, merge plan)
};

class SsgdSynchronizer final : public Synchronizer {
 public:
  // hook: what travels for each bucket; null = dense allreduce (make_allreduce_hook).
  SsgdSynchronizer(std::shared_ptr<ProcessGroup> group, SsgdOptions options,
                   std::unique_ptr<CommHook> hook = nullptr);

  // "ssgd/fusion" with the dense hook; else what travels, "ssgd/two_bit(tau=0.5)" (the schedule
  // is in rank 0's start-up log).
  std::string name() const override {
    const std::string what = hook_->name();
    return "ssgd/" + (what.empty() ? schedule_name(options_.schedule) : what);
  }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  void on_gradient_ready(size_t param_index, core::Tensor& param) override;
  void step(optim::Optimizer& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // prepare_eval, then the hook's per-rank state (residuals, velocities) to rank 0.
  void prepare_checkpoint(layers::Module& model) override;
  std::string epoch_summary() override { return hook_->epoch_summary(); }
  bool takes_over_momentum() const override { return hook_->takes_over_momentum(); }
  bool steps_on_gradient_average() const override { return hook_->exact_average(); }
  bool keeps_state_per_rank() const override { return hook_->keeps_state_per_rank(); }

  // "ssgd.*" entries: the settings the layout was made under (schedule, world size, parameter
  // sizes, bucket caps, MG-WFBP's profile_iters and configured alpha/beta), the bucket layout,
  // the iterations communicated, MG-WFBP's profile sums and plan state, and the cost in use.
  // Rank-independent: rank 0's state restores every rank. Then the hook's entries
  // (compressing_hook.h: residuals and velocities, every rank's after prepare_checkpoint).
  core::StateDict state_dict() const override;
  // Before setup: kept and applied at the end of setup. Otherwise:
  //  - no "ssgd.*" entries (another algorithm's or an older checkpoint): nothing restored; the
  //    buckets go on from the initial layout (rank 0 logs a note for FUSION and MGWFBP);
  //  - parameter count or sizes differ, or a malformed entry: an Error naming the entry;
  //  - another schedule, or a setting that shaped the layout differs (bucket caps for FUSION;
  //    world size, profile_iters, configured alpha/beta for MGWFBP): rank 0 logs a note naming
  //    the difference and the synchronizer keeps its fresh layout (rebuilt or re-profiled as
  //    in a new run);
  //  - otherwise the same buckets, progress and plan as the stopped run.
  // The hook's entries are restored in every case.
  void load_state_dict(const core::StateDict& state) override;

  // Introspection (tests, benchmarks, logs).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const LinkCost& cost() const { return cost_; }
  bool plan_ready() const { return plan_ready_; }
  // Mean profiled backward time per parameter, in hook order (MGWFBP, once profiled).
  const std::vector<double>& profiled_backward() const { return profiled_tb_; }
  const std::vector<size_t>& hook_order() const { return hook_order_; }

 private:
  void build_buckets(const std::vector<std::vector<size_t>>& groups);
  void launch(size_t bucket);
  GradBucket grad_bucket(size_t bucket) const;  // what the hook sees of it
  void launch_ready_in_order();  // sends the filled buckets from next_launch_ on, in order
  void note_unused(const std::vector<size_t>& unused);  // says once which parameters got no gradient
  void poll_completions();
  void wait_all();
  // Rank 0 computes groups of parameters (from its observed hook order) and broadcasts them;
  // every rank rebuilds its buckets from the result.
  void adopt_plan_from_rank0();
  std::vector<std::vector<size_t>> compute_groups() const;
  void restore_state(const core::StateDict& state);
  void note(const std::string& text) const;  // rank 0's log, if any

  std::shared_ptr<ProcessGroup> group_;
  SsgdOptions options_;
  std::unique_ptr<CommHook> hook_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;        // parameter index -> bucket
  std::vector<size_t> launch_order_;  // buckets in the order their allreduce was enqueued
  size_t next_launch_ = 0;             // the next bucket to send: buckets go in bucket order
  std::vector<std::string> param_names_;  // for messages (empty: refer to indices)
  int64_t iterations_with_unused_ = 0;    // iterations in which a parameter got no gradient

  int64_t iteration_ = -1;
  int micro_batch_ = 0;
  bool communicate_ = true;  // this backward is the last micro-batch of the iteration
  int64_t communicated_iters_ = 0;

  // Hook order and times of the current iteration, for FUSION's rebuild and MGWFBP's profile.
  std::vector<size_t> arrivals_;
  std::unique_ptr<core::DeviceMarks> backward_marks_;  // MG-WFBP's profile: a mark per gradient
  std::vector<size_t> hook_order_;
  std::vector<double> tb_sum_;
  int profiled_ = 0;
  std::vector<double> profiled_tb_;
  bool plan_ready_ = false;
  LinkCost cost_;

  bool set_up_ = false;
  std::optional<core::StateDict> pending_state_;  // loaded before setup
};

}  // namespace mt::dist
