// Gradient accumulation as a synchronizer sees it: with grad_accumulation_steps = k the trainer
// calls begin_iteration(it) once per micro-batch with the same `it`. Synchronizers that send from
// the gradient hooks (S-SGD, the parameter server, ByteScheduler) send on the k-th micro-batch
// only (the earlier ones just sum up locally), and step() belongs after it.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace mt::dist {

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
