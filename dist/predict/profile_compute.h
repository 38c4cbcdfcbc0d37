// The synthetic compute and the small collective helpers that the communication profiles
// (comm_profile.h, dssync_comm_profile.h) are built from. Training never runs its messages on
// idle cores: between and under them the ranks compute. So the profiles compute too, with a fixed
// amount of work that every rank calibrates at once (the contention of training), and time the
// network around it.
#pragma once
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

// A fixed amount of computation on the calling thread: `reps` products of 96x96 matrices, each
// feeding the next so none can be skipped. Fixed work, not fixed time: on shared cores a rank
// that is descheduled finishes later, as a training rank does.
class ComputeChunk {
 public:
  explicit ComputeChunk(int reps);
  void run();

 private:
  int reps_;
  core::Tensor a_, x_;
};

// A chunk that takes about `seconds` on each rank while every rank of `group` computes at once:
// calibrated on the ranks' mean rate of products over a quarter of a second of computing all at
// once, so all ranks do the same work. Collective.
ComputeChunk calibrated_chunk(ProcessGroup& group, core::Device device, double seconds);

// A thread that computes (small chunks) from construction until destruction, beside whatever
// the constructing thread does: the training thread's compute while messages are on the link.
class ComputeInBackground {
 public:
  ComputeInBackground();
  ~ComputeInBackground();  // stops and joins
  ComputeInBackground(const ComputeInBackground&) = delete;
  ComputeInBackground& operator=(const ComputeInBackground&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Computes (small chunks) until `seconds` have passed: the network idles, the cores do not, as in
// training between one iteration's messages and the next. Sleeping instead would rest the cores
// too, and with more ranks than cores the allreduce after it would start on idle cores that
// training's never has (docs/PERF.md).
void compute_for(double seconds);

// The same number on every rank: rank 0's value, broadcast. Collective.
double from_rank0(ProcessGroup& group, core::Device device, double value, const std::string& what);
// Mean over the group's ranks of each value. Collective.
std::vector<double> mean_over_ranks(ProcessGroup& group, core::Device device, const std::vector<double>& values,
                                    const std::string& what);
double median(std::vector<double> values);  // 0 for none

// The profiles' clock, and the seconds since a point of it.
using ProfileClock = std::chrono::steady_clock;
double seconds_since(ProfileClock::time_point start);

}  // namespace mt::dist
