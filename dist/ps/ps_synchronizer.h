// The parameter server, worker side (docs/algorithms.md section 6; README.md): pushes every
// gradient partition to its server with a note naming it, by schedule (bsp, wfbp, staggered),
// pulls the sums and leaves the average to the trainer's step. A tied parameter (BERT's word
// embedding) may go in two parts: the earlier uses' pushed as soon as final, the last use's rows
// among the workers (row_sparse_exchange.h).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/synchronizer.h"
#include "dist/comm/process_group.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_partition.h"
#include "dist/ps/row_sparse_exchange.h"
#include "dist/registry.h"

namespace mt::dist {

enum class PsSchedule { BSP, WFBP, STAGGERED };
const std::vector<std::string>& ps_schedule_names();  // in PsSchedule's order

struct PsOptions : SynchronizerOptions {
  PsSchedule schedule = PsSchedule::WFBP;
  int64_t partition_bytes = 4 << 20;
  int rounds = 4;  // STAGGERED: groups per server
  bool split_tied = true;  // WFBP, STAGGERED: tied parameters' parts exchanged apart (above)
  int grad_accumulation_steps = 1;
  int64_t first_partition_id = 0;  // the plan's partitions are ids from here on (registry.h)
};

class PsSynchronizer final : public Synchronizer {
 public:
  // `workers`: the N workers (metric averages, start-up broadcasts); `world`: workers and
  // servers, worker r being rank r of both and server s rank N+s of `world`.
  PsSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world, PsOptions options);
  ~PsSynchronizer() override;  // worker 0: tells the servers to stop (errors only logged)

  std::string name() const override { return "ps/" + ps_schedule_names()[static_cast<size_t>(options_.schedule)]; }
  int servers() const { return world_->size() - workers_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  void on_gradient_ready(size_t param_index, core::Tensor& param) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  bool steps_on_gradient_average() const override { return true; }
  bool keeps_state_per_rank() const override { return false; }
  std::string epoch_summary() override;

  // Introspection (tests, logs).
  const std::vector<PsPartition>& plan() const { return plan_; }
  int64_t pushes() const { return pushes_; }                       // since setup
  int64_t pushes_during_backward() const { return pushes_from_hooks_; }  // of those, from a hook
  int64_t pulls() const { return pulls_; }
  const std::vector<PsPushGroup>& push_groups() const { return groups_; }  // STAGGERED's, in push order
  const std::vector<bool>& split_parameters() const { return tied_; }  // tied, exchanged in two parts
  int64_t rows_exchanged() const { return rows_exchanged_; }  // the last uses' rows sent, since setup
  int64_t last_parts_in_pushes() const { return last_parts_in_pushes_; }  // partitions that took a last use's part

 private:
  using Clock = std::chrono::steady_clock;
  int64_t id(size_t k) const { return options_.first_partition_id + static_cast<int64_t>(k); }
  void push(size_t k);
  void push_staggered(bool finish);  // from a hook (finish false) or from step()
  void push_from_hook(size_t param_index);  // its partitions, now (WFBP) or in their staggered group
  void on_gradient_part(size_t param_index, const core::Tensor& part, int remaining);
  void add_last_part(size_t param_index, const core::Tensor& part);
  void stage(size_t k, const core::Tensor& flat_part);  // into outgoing_[k]: copied, or added to what is staged
  void learn_tied_parameters();  // after the first iteration's exchange

  std::shared_ptr<ProcessGroup> workers_;
  std::shared_ptr<ProcessGroup> world_;
  PsOptions options_;
  std::vector<Tensor> params_;
  std::vector<PsPartition> plan_;
  std::vector<std::vector<size_t>> partitions_of_;  // parameter -> its partitions
  std::vector<Tensor> outgoing_, incoming_;         // host staging, per partition
  std::vector<Tensor> notes_;     // per partition: {this worker, k, receipt wanted (a group's last)}
  std::vector<Tensor> receipts_;  // per partition, filled by the server's receipt
  std::vector<PsPushGroup> groups_;
  std::vector<bool> ready_;  // STAGGERED: partitions whose gradient is final this iteration
  size_t next_group_ = 0;    // STAGGERED: the first group not pushed yet this iteration
  std::vector<std::shared_ptr<Work>> push_work_, note_work_, pull_work_, receipt_work_;
  std::vector<Clock::time_point> pushed_at_;
  std::vector<bool> pushed_;
  ServerCommands commands_;                         // worker 0's
  // The split of tied parameters (learnt in the first communicating iteration).
  bool tied_known_ = false;
  bool split_ = false;                   // some parameter is tied: split from the second iteration
  std::vector<bool> tied_;               // per parameter
  std::vector<bool> used_again_;         // first iteration: a contribution with more to come
  std::vector<size_t> ready_order_;      // first iteration: parameters by their first contribution
  std::vector<bool> staged_;             // per partition: outgoing_ holds the earlier uses' part
  std::vector<GradientRows> late_rows_;  // per tied parameter: its last use's rows
  int64_t rows_exchanged_ = 0;
  int64_t last_parts_in_pushes_ = 0;
  int64_t summary_row_bytes_ = 0;

  MicroBatches micro_batches_{options_.grad_accumulation_steps};
  bool set_up_ = false;
  bool failed_ = false;  // an exchange failed: no stop message at the end
  int64_t steps_ = 0;
  int64_t pushes_ = 0, pushes_from_hooks_ = 0, pulls_ = 0;
  int64_t summary_steps_ = 0;
  double summary_wait_s_ = 0;
};

}  // namespace mt::dist
