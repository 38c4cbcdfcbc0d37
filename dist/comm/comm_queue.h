// CommQueue: one communication thread that runs a process group's operations one at a time,
// in the order they were issued. Issue order is the same on every rank (the caller's
// contract), so running them in that order is what keeps ranks matched. The caller gets a Work
// back at once and keeps computing; Work::wait() is where it meets the result.
//
// Failure rules (nothing may hang):
//  - every operation is bounded by its engine's own timeout, so the thread always moves on;
//  - wait() also keeps its own deadline (the timeout plus a grace period, counted from when the
//    operation started, or from the wait() call while it is still queued) in case the engine
//    does not honour its timeout;
//  - after one operation fails, the group is broken (a peer is gone or out of step): every
//    later operation fails at once with the first error instead of waiting again.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dist/comm/process_group.h"

namespace mt::dist {

class QueuedWork;

// The longest a timed-out operation spends naming the ranks that did not answer before it
// fails (dist/comm/silent_ranks.h); wait() allows for it on top of the timeout.
inline constexpr std::chrono::milliseconds kMaxRollCall{5000};

// The group's health, shared with its Work handles (which may outlive the group).
struct CommHealth {
  std::mutex mutex;
  std::string broken;  // the first failure; empty while healthy
  void mark(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    if (broken.empty()) broken = reason;
  }
  std::string get() {
    std::lock_guard<std::mutex> lock(mutex);
    return broken;
  }
};

class CommQueue {
 public:
  // `who` names the rank and group in every error ("rank 1 of gloo/tcp world of 4").
  CommQueue(std::string who, std::chrono::milliseconds timeout);
  ~CommQueue();  // fails the operations not yet started, waits for the running one, joins
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // `op` names the operation ("allreduce of 1048576 floats"); `run` throws on failure.
  std::shared_ptr<Work> enqueue(std::string op, std::function<void()> run);
  // Marks the group broken (wait() timeouts call it, so later operations fail fast).
  void mark_broken(const std::string& reason);
  const std::string& who() const { return who_; }

 private:
  void loop();

  std::string who_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<QueuedWork>> queue_;
  std::shared_ptr<CommHealth> health_ = std::make_shared<CommHealth>();
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mt::dist
