// DataLoader: batches of (transformed) examples for one rank, prepared ahead by a pool of
// threads so that reading, decoding and augmenting the next batches overlaps the training step.
//
// Concurrency, in one place: `threads` worker threads each claim the next batch number, build
// the whole batch, and file it in a reorder buffer keyed by batch number; next() hands the
// batches out strictly in order. Whole batches per thread (as PyTorch's DataLoader workers do)
// keep the threads independent: no per-batch thread start, no waiting for the slowest example
// of a split batch. The buffer is bounded: a thread claims batch k only while
// k < (batch the trainer takes next) + prefetch_batches + threads - 1, i.e. prefetch_batches
// ready batches plus one in progress per other thread. One mutex guards all shared state and
// one condition variable signals every change. Each epoch has a generation number:
// start_epoch() bumps it and clears the buffer, and a batch finished for an older generation
// is dropped, so restarting or abandoning an epoch never mixes batches. The destructor sets a
// stop flag that every wait checks, then joins; at worst it waits for the batches in progress.
//
// Determinism: the order comes from DistributedSampler(seed), and the augmentation of an example
// from a Generator keyed by (seed, epoch, dataset index), so batch contents do not depend on
// threads, timing, or where an epoch was resumed.
//
// GPU training (options.device a CUDA device, CUDA builds): each thread decodes into pinned
// host memory and copies the batch to the device itself (data/device_staging.h); next() then
// returns device tensors.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/batch_loader.h"
#include "data/dataset.h"
#include "data/device_staging.h"
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
  int threads = 1;           // threads preparing batches in parallel (>= 1)
  // Where batches are delivered. A CUDA device: pinned staging + copy on the loader's threads.
  core::Device device = core::Device::cpu();
};

class DataLoader : public BatchLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, Transform transform, LoaderOptions opt);
  ~DataLoader();  // stops and joins the threads
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts producing `epoch`'s batches, from batch `first_batch` on (> 0 resumes mid-epoch).
  // Any batches of the previous epoch still queued are discarded.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // Blocks until the next batch is ready; false at the end of the epoch. Rethrows an error
  // raised while preparing the batch (e.g. by the dataset).
  bool next(Batch& out) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  double wait_seconds() const override;  // total time next() spent waiting for the threads
  LoaderStats stats() const override;
  const Dataset& dataset() const { return *dataset_; }

 private:
  void worker_loop(int worker);
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch,
                   DeviceStaging* staging) const;

  std::shared_ptr<Dataset> dataset_;
  Transform transform_;
  LoaderOptions opt_;
  DistributedSampler sampler_;
  core::Shape image_shape_;
  int64_t image_numel_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t window_ = 1;  // batches claimed beyond the one next() takes next, at most
  std::vector<std::unique_ptr<DeviceStaging>> staging_;  // one per thread; empty on the CPU

  // Shared with the threads; guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> indices_;  // this rank's order for the epoch
  int64_t next_to_produce_ = 0;                            // next batch number to claim
  int64_t next_to_consume_ = 0;                            // next batch number next() returns
  std::map<int64_t, Batch> ready_;                         // finished batches by number
  std::exception_ptr error_;                               // the first failed batch's error
  int64_t failed_batch_ = -1;
  double wait_seconds_ = 0.0;
  int64_t images_ = 0;
  double busy_seconds_ = 0.0;

  std::vector<std::thread> workers_;  // last: start after everything they read is initialized
};

}  // namespace mt::data
