// S-SGD (docs/algorithms.md section 1): every rank holds a full replica, computes gradients on its
// shard, and the gradients are averaged before the same optimizer step everywhere. Gradients go
// in buckets; the schedule decides *when* a bucket travels (BSP: one bucket after backward;
// WFBP: one per parameter; FUSION: capped buckets; MG-WFBP: buckets from the merge plan of
// profiled backward times, merge_plan.h), and the communication hook (comm_hook.h) *what*
// travels: a dense allreduce / N by default, float16, or compressed with error feedback.
//
// A grad-ready hook copies the gradient into its bucket; a full bucket goes to the communication
// hook, which enqueues its collective on the process group's own thread (CPU) or stream (GPU), so
// backward goes on meanwhile. step() has the hook finish every message in launch order (each wait
// has the group's timeout and fails naming this rank and the bucket), copies the averages back
// and steps the optimizer. Collectives must be issued in the same order on every rank: the hooks
// fire in an order fixed by the autograd graph, the same on every rank, and buckets go out
// strictly in bucket order.
//
// The bucket layout (ssgd_layout.cpp) is rebuilt from rank 0's observed hook order after the
// first iteration (FUSION, WFBP) or the profile (MG-WFBP). Exact resume (ssgd_state.cpp): with
// 3+ ranks how gradients share a message shows in the summation order of the ring, so the state
// holds the layout and MG-WFBP's progress. Gradient accumulation: with grad_accumulation_steps =
// k the hooks communicate on the k-th micro-batch only.
#pragma once
#include <chrono>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device_marks.h"
#include "dist/ssgd/bucket.h"
#include "dist/ssgd/comm_hook.h"
#include "dist/ssgd/merge_plan.h"
#include "dist/synchronizer.h"
#include "dist/comm/process_group.h"
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
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  // prepare_eval, then the hook's per-rank state (residuals, velocities) to rank 0.
  void prepare_checkpoint(layers::Module& model) override;
  std::string epoch_summary() override { return hook_->epoch_summary(); }
  bool takes_over_momentum() const override { return hook_->takes_over_momentum(); }
  bool steps_on_gradient_average() const override { return hook_->exact_average(); }
  bool keeps_state_per_rank() const override { return hook_->keeps_state_per_rank(); }

  // The bucket layout and what shaped it ("ssgd.*"), then the hook's entries; what a checkpoint
  // of another config restores: ssgd_state.cpp.
  core::StateDict state_dict() const override;
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
  void poll_completions();  // the timeline's completion times
  void trace_messages(std::chrono::steady_clock::time_point wait_start);
  void wait_all();
  // The bucket layout (ssgd_layout.cpp). Rank 0 computes groups of parameters (from its
  // observed hook order) and broadcasts them; every rank rebuilds its buckets from the result.
  std::vector<std::vector<size_t>> initial_groups();
  void start_mgwfbp();   // the link's cost (measured or the config's), logged
  void update_layout();  // after an iteration's exchange
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

  MicroBatches micro_batches_{options_.grad_accumulation_steps};
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
