// CommQueue: one communication thread that runs a process group's operations one at a time, in
// issue order (the same on every rank, which keeps the ranks matched). The caller gets a Work at
// once; wait() keeps its own deadline besides the engine's timeout, and after one failure every
// later operation fails at once with the first error (README.md: nothing may hang).
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
  CommQueue(std::string who, std::chrono::milliseconds timeout);  // who: "rank 1 of gloo/tcp world of 4"
  ~CommQueue();  // fails the operations not yet started, waits for the running one, joins
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // `op` names the operation ("allreduce of 1048576 floats"); `run` throws on failure.
  std::shared_ptr<Work> enqueue(std::string op, std::function<void()> run);
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
