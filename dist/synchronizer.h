// The Synchronizer: the one seam between training and communication (README.md's seam table).
// Rank, world size, metric averages and the stop vote belong to the job (job.h).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/serialize.h"
#include "dist/timeline.h"
#include "layers/module.h"
#include "optim/step_guard.h"

namespace mt::dist {

// What every algorithm's options hold, as the trainer gives them (registry.h: options_from).
struct SynchronizerOptions {
  std::string config_text;             // the same on every rank (checked at setup)
  std::shared_ptr<Timeline> timeline;  // optional: spans on the compute and comm lanes
  std::ostream* log = nullptr;         // rank 0's start-up notes
};

class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  virtual std::string name() const = 0;

  // Once: check the replicas agree, make their weights identical; route every parameter's
  // gradient-ready hook to on_gradient_ready.
  virtual void setup(layers::Module& model, optim::Optimizer& optimizer) {
    const auto& params = optimizer.params();
    for (size_t i = 0; i < params.size(); ++i)
      params[i].register_grad_ready_hook([this, i](core::Tensor& p) { on_gradient_ready(i, p); });
  }
  virtual void begin_iteration(int64_t iteration) {}  // before each micro-batch's forward
  virtual void on_gradient_ready(size_t param_index, core::Tensor& param) {}
  // After the last micro-batch's backward. Algorithms that exchange gradients (S-SGD, the
  // parameter server, DLCP) leave the average in the gradients and return false: the trainer
  // steps its optimizer. Algorithms that own their update (CD-SGD, DS-Sync, local SGD,
  // ByteScheduler) take it here through `optimizer`, the trainer's StepGuard (its NaN/Inf check,
  // clipping and count of skipped steps then speak of their update), and return true.
  virtual bool end_iteration(optim::StepGuard& optimizer) { return false; }
  virtual void prepare_eval(layers::Module& model) {}
  // Collective, before rank 0 writes a checkpoint: prepare_eval, and per-rank state to rank 0.
  virtual void prepare_checkpoint(layers::Module& model) { prepare_eval(model); }
  // Momentum correction: the trainer then builds its optimizer without momentum and L2 decay.
  virtual bool takes_over_momentum() const { return false; }
  // The optimizer steps on the plain average, the same on every rank (loss scaling needs it).
  virtual bool steps_on_gradient_average() const { return false; }
  // Ranks hold state of their own: a checkpoint resumes on as many ranks only.
  virtual bool keeps_state_per_rank() const { return true; }
  // Rank-local statistics since the last call: a line for the epoch's log, and JSON members
  // (`"name":value,...`) for each train record of the metrics file; "" = none.
  virtual std::string epoch_summary() { return ""; }
  virtual std::string metrics_fields() { return ""; }

  virtual core::StateDict state_dict() const { return {}; }
  virtual void load_state_dict(const core::StateDict& state) {}
};

// Single-process training: nothing to communicate.
class LocalSynchronizer final : public Synchronizer {
 public:
  std::string name() const override { return "local"; }
  bool steps_on_gradient_average() const override { return true; }
  bool keeps_state_per_rank() const override { return false; }
};

// Gradient accumulation: begin_iteration(it) comes once per micro-batch with the same `it`; the
// algorithms that send from the gradient hooks send on the last one only.
class MicroBatches {
 public:
  explicit MicroBatches(int steps) : steps_(steps) {}

  void begin(int64_t iteration) {
    micro_batch_ = iteration == iteration_ ? micro_batch_ + 1 : 0;
    iteration_ = iteration;
  }
  int64_t iteration() const { return iteration_; }
  // This backward is its iteration's last micro-batch (before any begin: every backward is).
  bool communicate() const { return iteration_ < 0 || micro_batch_ % steps_ == steps_ - 1; }
  // end_iteration before the last micro-batch is a caller error.
  void check_step(const char* role, int rank) const {
    MT_CHECK(communicate(), role, " ", rank, ": end_iteration() on micro-batch ", micro_batch_ + 1, " of ", steps_,
             "; with dist.grad_accumulation_steps = k, call begin_iteration(it) before each of the k "
             "micro-batches and end_iteration() once after the last");
  }

 private:
  int steps_;
  int64_t iteration_ = -1;
  int micro_batch_ = 0;
};

}  // namespace mt::dist
