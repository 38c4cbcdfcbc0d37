// PrefetchQueue: the concurrency both batch loaders share (DataLoader, MlmLoader). Threads make
// an epoch's batches ahead of the one consumer, a bounded buffer hands them out strictly in
// order, a failed batch's exception reaches the consumer, the time the consumer waited is
// counted, and stopping is prompt. What a batch *is* stays with the loader: it passes a function
// that makes batch k of an epoch from that epoch's order of examples.
//
// Concurrency, in one place: `threads` threads each claim the next batch number, make the whole
// batch, and file it in a buffer keyed by batch number; next() hands the batches out in order.
// The buffer is bounded: a thread claims batch k only while
// k < (batch next() returns next) + prefetch_batches + threads - 1, i.e. prefetch_batches ready
// batches plus one in progress per other thread (one thread: at most prefetch_batches ready).
// One mutex guards all shared state and one condition variable signals every change. Each epoch
// has a generation number: start_epoch() bumps it and clears the buffer, and a batch finished
// for an older generation is dropped, so restarting or abandoning an epoch never mixes batches.
//
// Errors: the exception of a failed batch comes out of next() after the batches before it (the
// earliest failed batch wins when several threads fail); the queue stays failed until the next
// start_epoch().
//
// Nothing waits forever. next() waits at most `timeout` for one batch, then throws an Error
// naming the batch. The destructor sets a stop flag that every wait checks, so idle threads and
// threads waiting for room leave at once; it waits at most `timeout` for the batches in
// progress, and if one is still running it aborts the process with a message naming it: a
// thread cannot be cancelled, and leaving it running into the loader's freed memory would be
// worse than stopping. (The threads' own wait for work has no deadline: it ends with
// start_epoch(), room in the buffer, or the stop flag, all in the owner's hands.)
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/batch_loader.h"

namespace mt::data {

struct PrefetchOptions {
  std::string owner;  // starts every error message: "DataLoader", "MlmLoader"
  int64_t batches_per_epoch = 0;
  int prefetch_batches = 2;  // ready batches kept ahead of the consumer (>= 1)
  int threads = 1;           // threads making batches in parallel (>= 1)
  // The longest next() waits for one batch, and the destructor for the batches in progress.
  // A batch is milliseconds to seconds of work; ten minutes without one means a stuck source.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class PrefetchQueue {
 public:
  // Makes batch `batch` of `epoch` from the epoch's `order` (of examples), on thread `thread`
  // (0 .. threads-1, for per-thread resources). Called concurrently from the threads; may throw.
  // Batch::inputs.size(0) is what stats() counts as examples.
  using MakeBatch = std::function<Batch(const std::vector<int64_t>& order, int64_t epoch,
                                        int64_t batch, int thread)>;

  // Starts the threads; they idle until start_epoch(). `make` must stay valid until the
  // destructor returns.
  PrefetchQueue(PrefetchOptions options, MakeBatch make);
  ~PrefetchQueue();  // stops and joins the threads (see above for a stuck one)
  PrefetchQueue(const PrefetchQueue&) = delete;
  PrefetchQueue& operator=(const PrefetchQueue&) = delete;

  // Starts making `epoch`'s batches from `first_batch` on (> 0 resumes mid-epoch), from `order`;
  // batches of the previous epoch still queued or in progress are discarded.
  void start_epoch(int64_t epoch, int64_t first_batch, std::shared_ptr<const std::vector<int64_t>> order);
  // Blocks until the next batch is ready; false at the end of the epoch. Rethrows the error of
  // the batch, or throws when it is not ready within the timeout. One consumer thread.
  bool next(Batch& out);
  double wait_seconds() const;  // total time next() spent waiting for the threads
  LoaderStats stats() const;

 private:
  void thread_loop(int thread);

  const PrefetchOptions opt_;
  const MakeBatch make_;
  const int64_t window_;  // batches claimed beyond the one next() returns next, at most

  // Shared with the threads; guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;  // the epoch's examples, in order
  int64_t next_to_produce_ = 0;                          // next batch number to claim
  int64_t next_to_consume_ = 0;                          // next batch number next() returns
  std::map<int64_t, Batch> ready_;                       // finished batches by number
  std::exception_ptr error_;                             // the earliest failed batch's error
  int64_t failed_batch_ = -1;
  std::multiset<int64_t> in_progress_;  // batch numbers being made (any generation)
  int running_ = 0;                     // threads not yet returned from thread_loop
  double wait_seconds_ = 0.0;
  int64_t examples_ = 0;
  double busy_seconds_ = 0.0;

  std::vector<std::thread> threads_;  // last: start after everything they read is initialized
};

}  // namespace mt::data
