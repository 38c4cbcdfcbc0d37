#include "data/prefetch_queue.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace mt::data {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double seconds(std::chrono::milliseconds ms) { return ms.count() / 1000.0; }
}  // namespace

PrefetchQueue::PrefetchQueue(PrefetchOptions options, MakeBatch make)
    : opt_(std::move(options)),
      make_(std::move(make)),
      window_(int64_t(opt_.prefetch_batches) + opt_.threads - 1) {
  MT_CHECK(opt_.prefetch_batches >= 1, opt_.owner, ": prefetch_batches must be >= 1, got ",
           opt_.prefetch_batches);
  MT_CHECK(opt_.threads >= 1, opt_.owner, ": threads must be >= 1, got ", opt_.threads);
  MT_CHECK(opt_.batches_per_epoch >= 0, opt_.owner, ": batches_per_epoch must be >= 0, got ",
           opt_.batches_per_epoch);
  MT_CHECK(opt_.timeout.count() > 0, opt_.owner, ": the prefetch timeout must be > 0 ms, got ",
           opt_.timeout.count());
  MT_CHECK(make_ != nullptr, opt_.owner, ": no function to make batches");
  running_ = opt_.threads;  // before any thread exists, so no lock
  for (int t = 0; t < opt_.threads; ++t) threads_.emplace_back([this, t] { thread_loop(t); });
}

PrefetchQueue::~PrefetchQueue() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
  if (!cv_.wait_for(lock, opt_.timeout, [&] { return running_ == 0; })) {
    std::string batches;
    for (int64_t b : in_progress_) batches += (batches.empty() ? "" : ", ") + std::to_string(b);
    // A destructor cannot throw, and returning would free what the stuck thread still uses.
    std::fprintf(stderr,
                 "FATAL: %s: batch(es) %s still not made %g s after the loader was destroyed: the "
                 "data source is stuck (a hung file system?); aborting instead of waiting forever\n",
                 opt_.owner.c_str(), batches.c_str(), seconds(opt_.timeout));
    std::abort();
  }
  lock.unlock();
  for (std::thread& t : threads_) t.join();  // each has left thread_loop: returns at once
}

void PrefetchQueue::start_epoch(int64_t epoch, int64_t first_batch,
                                std::shared_ptr<const std::vector<int64_t>> order) {
  MT_CHECK(first_batch >= 0 && first_batch <= opt_.batches_per_epoch, opt_.owner, ": first_batch ",
           first_batch, " is outside [0, ", opt_.batches_per_epoch,
           "]; is the checkpoint from a run with another batch size or world size?");
  MT_CHECK(order != nullptr, opt_.owner, ": start_epoch() needs the epoch's order");
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    started_ = true;
    epoch_ = epoch;
    order_ = std::move(order);
    next_to_produce_ = first_batch;
    next_to_consume_ = first_batch;
    ready_.clear();
    error_ = nullptr;
    failed_batch_ = -1;
  }
  cv_.notify_all();
}

bool PrefetchQueue::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  MT_CHECK(started_, opt_.owner, ": call start_epoch() before next()");
  if (next_to_consume_ >= opt_.batches_per_epoch) return false;
  const auto t0 = Clock::now();
  // Every claimed batch is either filed or recorded as failed, so this normally ends well
  // before the timeout; stop_ is only set by the destructor but is checked for completeness.
  auto it = ready_.end();
  const bool settled = cv_.wait_for(lock, opt_.timeout, [&] {
    it = ready_.find(next_to_consume_);
    return stop_ || it != ready_.end() || (error_ && failed_batch_ <= next_to_consume_);
  });
  wait_seconds_ += seconds_since(t0);
  // Batches before the failed one still come out first, in order.
  if (it == ready_.end()) {
    if (!settled) {
      MT_FAIL(opt_.owner, ": batch ", next_to_consume_, " of epoch ", epoch_, " was not ready after ",
              seconds(opt_.timeout), " s: the thread making it is stuck or very slow; check the data "
              "source (a hung file system, a dataset that blocks?)");
    }
    if (error_) std::rethrow_exception(error_);
    MT_FAIL(opt_.owner, ": stopped while waiting for a batch");
  }
  out = std::move(it->second);
  ready_.erase(it);
  ++next_to_consume_;
  lock.unlock();
  cv_.notify_all();  // room in the window
  return true;
}

double PrefetchQueue::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_seconds_;
}

LoaderStats PrefetchQueue::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoaderStats s;
  s.images = examples_;
  s.busy_seconds = busy_seconds_;
  s.wait_seconds = wait_seconds_;
  s.threads = opt_.threads;
  return s;
}

void PrefetchQueue::thread_loop(int thread) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (started_ && !error_ && next_to_produce_ < opt_.batches_per_epoch &&
                       next_to_produce_ < next_to_consume_ + window_);
    });
    if (stop_) break;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_, batch = next_to_produce_++;
    const auto order = order_;  // keeps this epoch's order alive if start_epoch replaces it
    const auto mine = in_progress_.insert(batch);
    lock.unlock();

    Batch b;
    std::exception_ptr err;
    const auto t0 = Clock::now();
    try {
      b = make_(*order, epoch, batch, thread);
    } catch (...) {
      err = std::current_exception();
    }
    const double busy = seconds_since(t0);

    lock.lock();
    in_progress_.erase(mine);
    busy_seconds_ += busy;
    if (!err) examples_ += b.inputs.size(0);
    if (generation != generation_) continue;  // start_epoch() ran meanwhile: stale batch
    if (err) {
      if (!error_ || batch < failed_batch_) {  // keep the earliest failure: it surfaces first
        error_ = err;
        failed_batch_ = batch;
      }
    } else {
      ready_.emplace(batch, std::move(b));
    }
    cv_.notify_all();
  }
  --running_;
  cv_.notify_all();  // the destructor waits for running_ == 0
}

}  // namespace mt::data
