// DataLoader: batches of (transformed) examples for one rank, prepared ahead on a background
// thread so that reading and augmenting batch k+1 overlaps the training step on batch k.
//
// Concurrency, in one place: a producer thread fills a bounded queue (at most prefetch_batches
// ready batches) and next() takes from it; one mutex guards all shared state and one condition
// variable signals every change. Each epoch has a generation number: start_epoch() bumps it and
// clears the queue, and a batch finished for an older generation is dropped, so restarting or
// abandoning an epoch never mixes batches. The destructor sets a stop flag that every wait
// checks, then joins; at worst it waits for the one batch being prepared.
//
// Determinism: the order comes from DistributedSampler(seed), and the augmentation of an example
// from a Generator keyed by (seed, epoch, dataset index), so batch contents do not depend on
// threads, timing, or where an epoch was resumed.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace mt::data {

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  // Drops the last partial batch, and cuts the epoch order so ranks split it evenly (instead of
  // padding it by wrap-around).
  bool drop_last = false;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  int prefetch_batches = 2;  // ready batches kept ahead of the trainer (>= 1)
  int threads = 1;           // threads filling one batch (>= 1), the producer included
};

struct Batch {
  core::Tensor inputs;   // float32 [B, C, H, W]
  core::Tensor targets;  // int64 [B]
  int64_t index = 0;     // batch number within the epoch
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, Transform transform, LoaderOptions opt);
  ~DataLoader();  // stops and joins the thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts producing `epoch`'s batches, from batch `first_batch` on (> 0 resumes mid-epoch).
  // Any batches of the previous epoch still queued are discarded.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // Blocks until the next batch is ready; false at the end of the epoch. Rethrows an error
  // raised while preparing the batch (e.g. by the dataset).
  bool next(Batch& out);
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  double wait_seconds() const;  // total time next() spent waiting for the producer
  const Dataset& dataset() const { return *dataset_; }

 private:
  void producer_loop();
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch) const;

  std::shared_ptr<Dataset> dataset_;
  Transform transform_;
  LoaderOptions opt_;
  DistributedSampler sampler_;
  core::Shape image_shape_;
  int64_t image_numel_ = 0;
  int64_t batches_per_epoch_ = 0;

  // Shared with the producer; guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> indices_;  // this rank's order for the epoch
  int64_t next_to_produce_ = 0;
  int64_t next_to_consume_ = 0;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  double wait_seconds_ = 0.0;

  std::thread producer_;  // last: starts after everything it reads is initialized
};

}  // namespace mt::data
