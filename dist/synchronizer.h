// The Synchronizer: the one seam between training and communication. The trainer calls it at
// fixed points of every iteration; each data-parallel algorithm implements it and registers
// itself by name (registry.h), and the trainer does not change when one is added. Rank, world
// size, metric averages and the stop vote belong to the job (job.h), not to an algorithm.
//
//   setup(model, optimizer)        once: broadcast initial weights, check replicas agree,
//                                  register the gradient-ready hooks
//   begin_iteration(it)            before forward
//   on_gradient_ready(i, param)    from autograd, the moment parameter i's gradient is final
//                                  (S-SGD WFBP/fusion start its allreduce here)
//   step(optimizer)                after backward: finish communication and update weights
//                                  (the default just steps the optimizer)
//   model_for_eval(model)          before evaluation and checkpoints (DS-Sync: the average)
//   epoch_summary()                once per epoch: a line of communication statistics for the
//                                  log (compressed exchanges), empty when there is nothing to say
//   metrics_fields()               with each metrics record: the algorithm's own numbers (DLCP's
//                                  loss and retransmissions)
#pragma once
#include <cstdint>
#include <string>

#include "core/serialize.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace mt::dist {

class Synchronizer {
 public:
  virtual ~Synchronizer() = default;
  virtual std::string name() const = 0;

  virtual void setup(layers::Module& model, optim::Optimizer& optimizer);
  virtual void begin_iteration(int64_t iteration) {}
  virtual void on_gradient_ready(size_t param_index, core::Tensor& param) {}
  virtual void step(optim::Optimizer& optimizer) { optimizer.step(); }
  virtual void prepare_eval(layers::Module& model) {}
  // Before the trainer saves a checkpoint (collective; only rank 0 writes the file): what
  // prepare_eval does, and algorithms whose ranks hold different state (DS-Sync, CD-SGD,
  // compressed exchanges) also collect every rank's on rank 0 for state_dict (replicas.h).
  virtual void prepare_checkpoint(layers::Module& model) { prepare_eval(model); }
  // True when the synchronizer applies SGD's momentum (and L2 weight decay) itself, before its
  // exchange (momentum correction, momentum_correction.h): the optimizer given to setup and
  // step must then be plain SGD without them, which the trainer builds (it still checks the
  // averaged update for NaN/Inf and clips it, as for every algorithm).
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

}  // namespace mt::dist
