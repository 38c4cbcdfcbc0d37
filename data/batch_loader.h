// BatchLoader: what the trainer pulls batches from, whatever the data is. The image DataLoader
// (data/loader.h) and the masked-language-model loader (data/mlm_loader.h) implement it, so the
// training loop, resume, and the progress line's data statistics do not care which one runs.
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace mt::data {

struct Batch {
  // Images: float32 [B, C, H, W]. Token sequences: int64 token ids [B, S].
  core::Tensor inputs;
  // Images: int64 class labels [B]. Token sequences: int64 [B, S], the original token at each
  // position chosen for prediction and -100 everywhere else (ignored by the loss).
  core::Tensor targets;
  // Token sequences: float32 [B, S], 1 for a real token and 0 for padding. Images: undefined.
  core::Tensor mask;
  int64_t index = 0;  // batch number within the epoch
  // GPU loaders: the upload's event (a cudaEvent_t) on the loader's copy stream. The loader's
  // next() makes the compute stream wait for it before handing the batch over; null otherwise.
  std::shared_ptr<void> uploaded;
};

// Throughput counters, cumulative since the loader was built.
struct LoaderStats {
  int64_t images = 0;         // examples (images or sequences) prepared
  double busy_seconds = 0.0;  // time the threads spent preparing them, summed over threads
  double wait_seconds = 0.0;  // time next() spent blocked, waiting for a batch
  int threads = 1;
  // Examples/s the pool sustains when it never has to pause for a full buffer:
  // threads * images / busy_seconds (0 before the first batch).
  double decode_images_per_second() const {
    return busy_seconds > 0 ? threads * images / busy_seconds : 0.0;
  }
};

class BatchLoader {
 public:
  virtual ~BatchLoader() = default;
  // Starts producing `epoch`'s batches, from batch `first_batch` on (> 0 resumes mid-epoch).
  virtual void start_epoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // Blocks until the next batch is ready; false at the end of the epoch.
  virtual bool next(Batch& out) = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual double wait_seconds() const = 0;
  virtual LoaderStats stats() const = 0;
};

}  // namespace mt::data
