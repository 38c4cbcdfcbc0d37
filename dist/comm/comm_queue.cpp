#include "dist/comm/comm_queue.h"

#include "core/error.h"
#include "dist/comm/silent_ranks.h"

namespace mt::dist {

using Clock = std::chrono::steady_clock;

// An operation that misses its engine's timeout by more than this (which covers the roll call
// of a timed-out one) is stuck.
constexpr auto kGrace = std::chrono::seconds(2) + kMaxRollCall;

class QueuedWork : public Work {
 public:
  QueuedWork(std::string who, std::shared_ptr<CommHealth> health, std::string op, std::function<void()> run,
             std::chrono::milliseconds timeout)
      : who_(std::move(who)), health_(std::move(health)), op_(std::move(op)), run_(std::move(run)), timeout_(timeout) {}

  void wait() override;
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_ == kDone;
  }

  // Called by the communication thread.
  void execute(const std::string& broken) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_ = kRunning;
      started_ = Clock::now();
    }
    std::string error;
    if (!broken.empty()) {
      error = "not run because the group is broken by an earlier failure: " + broken;
    } else {
      try {
        run_();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    run_ = nullptr;  // releases the tensors this operation held
    finish(error);
  }
  void finish(const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = kDone;
    error_ = error;
    cv_.notify_all();
  }
  const std::string& op() const { return op_; }
  const std::string& error() const { return error_; }  // valid once done

 private:
  enum State { kQueued, kRunning, kDone };
  std::string who_;
  std::shared_ptr<CommHealth> health_;
  std::string op_;
  std::function<void()> run_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  State state_ = kQueued;
  Clock::time_point started_;
  std::string error_;
};

void QueuedWork::wait() {
  const auto called = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (state_ != kDone) {
    const auto from = state_ == kRunning ? std::max(called, started_) : called;
    const auto deadline = from + timeout_ + kGrace;
    if (Clock::now() >= deadline) {
      const std::string msg = who_ + ": " + op_ + " did not finish within " + seconds_number(timeout_) + " s" +
                              (state_ == kRunning ? "" : " (still queued behind earlier operations)") +
                              ": a peer is probably dead or stuck; check the other ranks' output";
      lock.unlock();
      health_->mark(msg);
      MT_FAIL(msg);
    }
    cv_.wait_until(lock, deadline);
  }
  if (!error_.empty()) {
    MT_FAIL(who_, ": ", op_, " failed: ", error_,
            ". A peer probably exited or timed out; check the other ranks' output");
  }
}

CommQueue::CommQueue(std::string who, std::chrono::milliseconds timeout)
    : who_(std::move(who)), timeout_(timeout) {
  thread_ = std::thread([this] { loop(); });
}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& w : queue_) w->finish("the process group was destroyed before it ran");
    queue_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> CommQueue::enqueue(std::string op, std::function<void()> run) {
  auto work = std::make_shared<QueuedWork>(who_, health_, std::move(op), std::move(run), timeout_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MT_CHECK(!stopping_, who_, ": ", work->op(), " issued on a process group being destroyed");
    queue_.push_back(work);
  }
  cv_.notify_all();
  return work;
}

void CommQueue::mark_broken(const std::string& reason) { health_->mark(reason); }

void CommQueue::loop() {
  while (true) {
    std::shared_ptr<QueuedWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      work = queue_.front();
      queue_.pop_front();
    }
    work->execute(health_->get());
    if (!work->error().empty()) mark_broken(work->op() + ": " + work->error());
  }
}

}  // namespace mt::dist
