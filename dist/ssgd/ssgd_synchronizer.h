// S-SGD: every rank steps on the average of all ranks' gradients, exchanged in buckets while
// backward runs. The schedule decides when a bucket travels, the communication hook
// (comm_hook.h) what travels. The walk through one allreduce: README.md.
#pragma once
#include <chrono>
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

namespace mt::dist {

struct SsgdOptions : SynchronizerOptions {
  Schedule schedule = Schedule::FUSION;
  double bucket_cap_mb = 25.0;        // FUSION: MiB per bucket
  double first_bucket_cap_mb = 1.0;   // FUSION: MiB of the first bucket
  int profile_iters = 5;              // MGWFBP: iterations profiled (after one warm-up iteration)
  double alpha = -1.0;                // MGWFBP: seconds per message; < 0 = measure at start-up
  double beta = -1.0;                 // MGWFBP: seconds per byte; < 0 = measure at start-up
  double gamma = 0.0;                 // MGWFBP, shared cores only: compute lost per message
  int grad_accumulation_steps = 1;
};

class SsgdSynchronizer final : public Synchronizer {
 public:
  // hook: null = dense allreduce (make_allreduce_hook).
  SsgdSynchronizer(std::shared_ptr<ProcessGroup> group, SsgdOptions options,
                   std::unique_ptr<CommHook> hook = nullptr);

  // "ssgd/fusion" with the dense hook; else what travels, "ssgd/two_bit(tau=0.5)".
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

  // The bucket layout and what shaped it, then the hook's entries (ssgd_state.cpp).
  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  // For tests, benchmarks and logs.
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const LinkCost& cost() const { return cost_; }
  bool plan_ready() const { return profile_.plan_ready; }
  const std::vector<double>& profiled_backward() const { return profile_.means; }
  const std::vector<size_t>& hook_order() const { return profile_.hook_order; }

 private:
  void build_buckets(const std::vector<std::vector<size_t>>& groups);
  void launch(size_t bucket);
  GradBucket grad_bucket(size_t bucket) const;  // what the hook sees of it
  void launch_ready_in_order();  // sends the filled buckets from next_launch_ on, in order
  void note_unused(const std::vector<size_t>& unused);  // says once which parameters got no gradient
  void poll_completions();  // the timeline's completion times
  void trace_messages(std::chrono::steady_clock::time_point wait_start);
  void wait_all();
  // The bucket layout (ssgd_layout.cpp): rank 0 computes it and broadcasts it.
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

  // FUSION's rebuild and MG-WFBP's profile: this iteration's hook order and times.
  std::vector<size_t> arrivals_;
  std::unique_ptr<core::DeviceMarks> backward_marks_;  // MG-WFBP's profile: a mark per gradient
  BackwardProfile profile_;
  LinkCost cost_;

  bool set_up_ = false;
  std::optional<core::StateDict> pending_state_;  // loaded before setup
};

}  // namespace mt::dist
