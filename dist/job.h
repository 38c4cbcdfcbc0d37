// The job: this process's place in the data-parallel world and the few things every rank must
// agree on outside the gradient exchange: metric averages and when to stop. One object owns
// them, whatever the algorithm; one process is a world of 1 (nothing is sent).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>

#include "dist/comm/process_group.h"

namespace mt::dist {

class Job {
 public:
  // world == nullptr: one process. Averages and votes travel on the world's device
  // (ProcessGroup::device(): the GPU for NCCL, the CPU for Gloo), whatever the model's.
  explicit Job(std::shared_ptr<ProcessGroup> world);

  int rank() const { return world_ ? world_->rank() : 0; }
  int world_size() const { return world_ ? world_->size() : 1; }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

  // The mean of `value` over ranks (collective; exact to double precision for metric sums).
  double average(double value);
  // Whether any rank says yes (collective, now).
  bool any(bool local);
  // The per-iteration stop check: `any`, but on a communicator of its own and late (a vote is
  // counted at the next vote), so it never waits behind a gradient exchange still in flight
  // (CD-SGD overlaps the next iteration with it). Votes are taken about once a second, not every
  // iteration: each is a world allreduce, and on a slow shared link every hop waits in the
  // link's queue (docs/PERF.md). Rank 0 proposes the interval in iterations with each vote, so
  // all ranks vote at the same iterations; a stop is honoured within about two intervals.
  // On NCCL the vote is a device tensor on a communicator of its own, read back at the next
  // vote (no host read in the iteration). One process without a world votes alone; a world of
  // one (dist.force_distributed) votes on its communicator as any other.
  bool stop_vote(bool local);
  void drain_stop_vote();  // waits for the vote in flight (before training returns)

 private:
  std::shared_ptr<ProcessGroup> world_;
  std::shared_ptr<ProcessGroup> votes_;  // a second connection of the world's ranks
  core::Tensor vote_;                    // {any rank asks to stop, rank 0's proposed interval}
  std::shared_ptr<Work> vote_work_;
  int64_t checks_to_next_vote_ = 0;
  int64_t vote_interval_ = 1;
  bool stop_asked_ = false;  // a local request not voted yet
  std::chrono::steady_clock::time_point last_vote_;
};

}  // namespace mt::dist
