#include "dist/job.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dist/replicas.h"

namespace mt::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kStopVoteSeconds = 1.0;      // about one vote a second
constexpr int64_t kMaxStopVoteInterval = 100;  // and at least one every 100 iterations

}  // namespace

Job::Job(std::shared_ptr<ProcessGroup> world) : world_(std::move(world)) {}

double Job::average(double value) {
  // A world of one still communicates (dist.force_distributed runs the distributed path so).
  return world_ ? mean_over_ranks(*world_, value) : value;
}

bool Job::any(bool local) {
  if (!world_) return local;
  return average(local ? 1.0 : 0.0) > 0.0;
}

bool Job::stop_vote(bool local) {
  if (!world_) return local;
  // Engines with their own communicator for it; any other group (tests' fakes) votes in step.
  if (world_->backend() != "gloo" && world_->backend() != "nccl") return any(local);
  if (!votes_) {
    // Collective: every rank takes its first vote at the same iteration.
    std::vector<int> everyone(static_cast<size_t>(world_size()));
    std::iota(everyone.begin(), everyone.end(), 0);
    votes_ = world_->subgroup(everyone);
  }
  stop_asked_ = stop_asked_ || local;
  if (--checks_to_next_vote_ > 0) return false;
  bool stop = false;
  int64_t next = 1;  // no vote counted yet: the next check votes again (and times an iteration)
  if (vote_work_) {
    finish(vote_work_, *votes_, "agreeing whether to stop (the previous vote)");
    const std::vector<float> votes = vote_.to(core::Device::cpu()).to_vector();
    stop = votes[0] > 0.0f;
    next = std::clamp<int64_t>(std::llround(votes[1]), 1, kMaxStopVoteInterval);
  }
  float proposal = 0.0f;
  if (rank() == 0) {
    const auto now = Clock::now();
    const double per_iteration =
        vote_work_ ? std::chrono::duration<double>(now - last_vote_).count() / vote_interval_ : 0.0;
    proposal = per_iteration > 0 ? static_cast<float>(std::clamp<double>(std::ceil(kStopVoteSeconds / per_iteration),
                                                                         1, kMaxStopVoteInterval))
                                 : 1.0f;
    last_vote_ = now;
  }
  // On the device the world's backend reduces (NCCL: the GPU); read back only at the next
  // vote, when it has long finished, so no iteration waits for it.
  vote_ = Tensor::from_vector(std::vector<float>{stop_asked_ ? 1.0f : 0.0f, proposal}, {2}).to(votes_->device());
  vote_work_ = votes_->allreduce(vote_);
  stop_asked_ = false;
  vote_interval_ = checks_to_next_vote_ = next;
  return stop;
}

void Job::drain_stop_vote() {
  if (!vote_work_) return;
  finish(vote_work_, *votes_, "agreeing whether to stop (the last vote)");
  vote_work_.reset();
}

}  // namespace mt::dist
