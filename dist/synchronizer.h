// The Synchronizer: the one seam between training and communication (README.md's seam table).
// The trainer calls it at fixed points of every iteration and autograd calls on_gradient_ready
// the moment a parameter's gradient is final. Rank, world size, metric averages and the stop
// vote belong to the job (job.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/serialize.h"
#include "layers/module.h"
#include "optim/step_guard.h"

namespace mt::dist {

class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  virtual std::string name() const = 0;

  // Once: check the replicas agree, broadcast the initial weights; the base class routes every
  // parameter's gradient-ready hook to on_gradient_ready.
  virtual void setup(layers::Module& model, optim::Optimizer& optimizer);
  virtual void begin_iteration(int64_t iteration) {}
  virtual void on_gradient_ready(size_t param_index, core::Tensor& param) {}
  // After the last micro-batch's backward: the end of the iteration's exchange. Algorithms that
  // exchange gradients (S-SGD, the parameter server, DLCP) leave the average in every
  // parameter's gradient and return false: the trainer steps its optimizer on it. Algorithms
  // that own their update (CD-SGD, DS-Sync, local SGD, ByteScheduler) take it here, through
  // `optimizer`, the trainer's StepGuard (whose NaN/Inf check, clipping and count of skipped
  // steps then speak of their update), and return true.
  virtual bool end_iteration(optim::StepGuard& optimizer) { return false; }
  virtual void prepare_eval(layers::Module& model) {}
  // Before the trainer saves a checkpoint (collective; only rank 0 writes the file): what
  // prepare_eval does, and algorithms whose ranks hold different state (DS-Sync, CD-SGD,
  // compressed exchanges) also collect every rank's on rank 0 for state_dict (replicas.h).
  virtual void prepare_checkpoint(layers::Module& model) { prepare_eval(model); }
  // True when the synchronizer applies SGD's momentum (and L2 weight decay) itself, before its
  // exchange (momentum correction, momentum_correction.h): the optimizer given to setup must
  // then be plain SGD without them, which the trainer builds.
  virtual bool takes_over_momentum() const { return false; }
  // True when the optimizer steps on the plain average of this step's gradients, the same on
  // every rank: the step guard's loss-scale unscaling is then exact (loss scaling needs it).
  virtual bool steps_on_gradient_average() const { return false; }
  // True when ranks hold state of their own (local weights, residuals, velocities): such a
  // checkpoint resumes on as many ranks only.
  virtual bool keeps_state_per_rank() const { return true; }
  // Statistics since the last call (bytes per iteration, compression ratio, wait time); "" =
  // nothing to report. Rank-local: the trainer prints rank 0's.
  virtual std::string epoch_summary() { return ""; }
  // JSON members (`"name":value,...`, no braces) the trainer adds to each train record of the
  // metrics file: the algorithm's statistics since the last call; "" = none. Rank-local.
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

// Gradient accumulation as a synchronizer sees it: with grad_accumulation_steps = k the trainer
// calls begin_iteration(it) once per micro-batch with the same `it`. Synchronizers that send from
// the gradient hooks (S-SGD, the parameter server, ByteScheduler) send on the k-th micro-batch
// only (the earlier ones just sum up locally), and step() belongs after it.
class MicroBatches {
 public:
  explicit MicroBatches(int steps) : steps_(steps) {}

  // From begin_iteration: a new iteration starts at micro-batch 0; the same one counts on.
  void begin(int64_t iteration) {
    micro_batch_ = iteration == iteration_ ? micro_batch_ + 1 : 0;
    iteration_ = iteration;
  }
  int64_t iteration() const { return iteration_; }
  // This backward is its iteration's last micro-batch (before any begin: every backward is).
  bool communicate() const { return iteration_ < 0 || micro_batch_ % steps_ == steps_ - 1; }
  // step() before the last micro-batch is a caller error; `role` and `rank` name the process.
  void check_step(const char* role, int rank) const {
    MT_CHECK(communicate(), role, " ", rank, ": step() on micro-batch ", micro_batch_ + 1, " of ", steps_,
             "; with dist.grad_accumulation_steps = k, call begin_iteration(it) before each of the k "
             "micro-batches and step() once after the last");
  }

 private:
  int steps_;
  int64_t iteration_ = -1;
  int micro_batch_ = 0;
};

}  // namespace mt::dist
