// ByteScheduler (Peng et al., SOSP'19; docs/algorithms.md section 7; README.md): gradient
// partitions by priority within a credit, on allreduce ("a2a") or parameter servers ("ps"), and
// each parameter's update applied when the next forward is about to read it. The step's NaN/Inf
// vote travels first; clipping and loss scaling are refused (they need every gradient first).
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/bytescheduler/bytescheduler_queue.h"
#include "dist/bytescheduler/credit_search.h"
#include "dist/synchronizer.h"
#include "dist/comm/process_group.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_partition.h"
#include "mintrain.pb.h"

namespace mt::dist {

enum class BsArchitecture { A2A, PS };

// dist.bytescheduler.partition_bytes 0: the partition measured fastest for the architecture
// (docs/PERF.md, ByteScheduler).
int64_t default_partition_bytes(BsArchitecture architecture);
// The config's largest partition, its architecture's default where it says 0.
int64_t partition_bytes_of(const mintrain::ByteSchedulerConfig& config);

struct ByteSchedulerOptions : SynchronizerOptions {
  BsArchitecture architecture = BsArchitecture::A2A;
  int64_t partition_bytes = 512 << 10;
  int64_t credit_bytes = 0;  // 0 = search at start
  int search_iters = 3;
  int grad_accumulation_steps = 1;
  int64_t first_partition_id = 0;  // "ps": the vote's id, the partitions' from the next (registry.h)
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // the backstop of every wait
};

class ByteSchedulerSynchronizer final : public Synchronizer {
 public:
  using Clock = std::chrono::steady_clock;
  // `workers`: the N workers. `world`: workers then servers for "ps" (server s is rank N+s),
  // null for "a2a".
  ByteSchedulerSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world,
                            ByteSchedulerOptions options);
  ~ByteSchedulerSynchronizer() override;  // finishes the exchange in flight; "ps": tells the servers to stop

  std::string name() const override;
  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  void on_gradient_ready(size_t param_index, core::Tensor& param) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;  // every update applied, worker 0's batch-norm statistics
  bool keeps_state_per_rank() const override { return false; }
  std::string epoch_summary() override;

  // Applies every update still pending (waits for the partitions in flight).
  void finish();

  // Introspection (tests, logs). Items: 0 is the vote, 1 + k is partition k of plan().
  struct ItemTimes {
    Clock::time_point ready, sent, arrived;
  };
  const std::vector<PsPartition>& plan() const { return plan_; }
  std::vector<ItemTimes> last_exchange_times() const;  // of the last exchange that finished
  std::vector<size_t> last_send_order() const;          // items in the order they were sent
  // Partitions of the previous exchange not yet arrived when parameter 0's update was applied
  // (its gate opened) in the last iteration: > 0 means forward ran ahead of the exchange.
  int64_t unarrived_at_first_gate() const { return unarrived_at_first_gate_; }
  int64_t credit_bytes() const { return credit_now_; }  // of the next exchange
  bool searching_credit() const { return search_.searching(); }

 private:
  // The next forward waits, parameter by parameter, for the pending update: a forward pre-hook
  // on every module that owns parameters calls before_forward_use for each of them.
  void gate_forward(layers::Module& model);
  void before_forward_use(size_t param_index);
  void start_exchange();
  void stage(size_t param);           // main thread: gradient to the send buffers, marked ready (once)
  void finish_pending();              // main thread: every partition arrived, every update applied
  void apply(size_t param);           // main thread: parameter's averaged gradient -> optimizer
  void wait_engine_idle();            // main thread: the engine finished the last exchange started
  // Main thread, under `lock`: until `done`, an engine error or 3 x the timeout; the last two fail naming `what`.
  void wait_for(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done, const std::string& what);
  void engine_loop();
  CreditQueue exchange_queue();  // every item, at the credit of the exchange starting
  void run_a2a(int64_t exchange);
  void run_ps(int64_t exchange);
  void mark_arrived(size_t item);  // engine thread: the item is here (and on the timeline)
  void fail(const std::string& what);
  std::string part_name(size_t item) const;  // "partition 3 (parameter 1, 256 bytes)" / "the vote"
  void choose_credit_after(double seconds);   // the search, from worker 0's iteration time

  std::shared_ptr<ProcessGroup> workers_, world_;
  std::shared_ptr<ProcessGroup> engine_group_;  // "a2a": a communicator of the engine's own
  ByteSchedulerOptions options_;
  optim::Optimizer* optimizer_ = nullptr;
  std::vector<Tensor> params_;
  std::vector<PsPartition> plan_;               // forward order = priority order
  std::vector<std::vector<size_t>> items_of_;   // parameter -> its items
  std::vector<int64_t> threshold_;              // "a2a": ready everywhere once the agreed count reaches it
  std::vector<Tensor> send_, result_;           // host buffers per item ("a2a": the same tensor)
  std::vector<int> server_of_;                  // "ps"
  std::vector<Tensor> notes_, receipts_;        // "ps": per item, {worker, item, receipt wanted} and the receipt
  int workers_n_ = 1;

  // Shared with the engine thread, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t exchange_ = -1, engine_done_ = -1;
  std::vector<bool> local_ready_;  // per parameter
  int64_t local_count_ = 0;        // gradients ready in backward order (+1 for the vote)
  int64_t ready_events_ = 0;
  std::vector<bool> arrived_;      // per item
  std::vector<ItemTimes> times_, last_times_;
  std::vector<size_t> send_order_, last_send_order_;
  int64_t exchange_credit_ = 0;    // the credit of exchange_
  std::string error_;
  bool stopping_ = false;
  int64_t probes_ = 0;  // "a2a": messages sent for readiness alone, since setup
  std::thread engine_;

  // Main thread.
  int64_t credit_now_ = 0;
  MicroBatches micro_batches_{options_.grad_accumulation_steps};
  bool exchange_open_ = false;   // started, its step() not yet called
  bool pending_ = false;         // stepped, updates not all applied
  bool pending_skipped_ = false;
  double pending_lr_ = 0;
  std::vector<bool> applied_;
  size_t applied_count_ = 0;
  double norm_sq_ = 0, last_norm_ = 0;
  int64_t local_nonfinite_ = 0;  // NaN/Inf values in this exchange's staged gradients
  int64_t unarrived_at_first_gate_ = 0;
  bool set_up_ = false;
  Clock::time_point last_step_at_{};
  CreditSearch search_;
  int64_t exchanges_ = 0;
  int64_t summary_steps_ = 0, summary_probes_ = 0;
  double summary_wait_s_ = 0, summary_gate_s_ = 0;
  ServerCommands commands_;  // "ps", worker 0
  // The model's forward pre-hooks outlive nothing: they check this token, which dies with us.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace mt::dist
