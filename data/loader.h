// DataLoader: batches of (transformed) examples for one rank, prepared ahead by a pool of
// threads so that reading, decoding and augmenting the next batches overlaps the training step.
//
// Concurrency (data/prefetch_queue.h): `threads` threads each build whole batches, claiming
// the next batch number, and next() hands them out strictly in order from a bounded buffer of
// prefetch_batches ready batches plus one in progress per other thread. Whole batches per thread
// (as PyTorch's DataLoader workers do) keep the threads independent: no per-batch thread start,
// no waiting for the slowest example of a split batch. start_epoch() drops the previous epoch's
// batches; the destructor stops the threads, waiting at worst for the batches in progress.
//
// Determinism: the order comes from DistributedSampler(seed), and the augmentation of an example
// from a Generator keyed by (seed, epoch, dataset index), so batch contents do not depend on
// threads, timing, or where an epoch was resumed.
//
// GPU training (options.device a CUDA device, CUDA builds): each thread decodes into pinned
// host memory and queues the batch's copy to the device on its own non-blocking stream
// (data/device_staging.h); next() returns device tensors, with the compute stream told to wait
// for their copy.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "data/batch_loader.h"
#include "data/dataset.h"
#include "data/device_staging.h"
#include "data/prefetch_queue.h"
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
  // raised while preparing the batch (e.g. by the dataset); an Error when none comes within
  // PrefetchOptions::timeout (a stuck data source).
  // GPU: the compute stream is made to wait for the batch's upload (data/device_staging.h).
  bool next(Batch& out) override;
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  double wait_seconds() const override { return queue_->wait_seconds(); }  // blocked in next()
  LoaderStats stats() const override { return queue_->stats(); }
  const Dataset& dataset() const { return *dataset_; }

 private:
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch,
                   DeviceStaging* staging) const;

  std::shared_ptr<Dataset> dataset_;
  Transform transform_;
  LoaderOptions opt_;
  DistributedSampler sampler_;
  core::Shape image_shape_;
  int64_t image_numel_ = 0;
  int64_t batches_per_epoch_ = 0;
  std::vector<std::unique_ptr<DeviceStaging>> staging_;  // one per thread; empty on the CPU
  // Last: its threads start after everything make_batch reads is initialized, and are joined
  // before any of it is destroyed.
  std::unique_ptr<PrefetchQueue> queue_;
};

}  // namespace mt::data
