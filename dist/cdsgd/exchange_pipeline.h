// ExchangePipeline: CD-SGD's compressed exchanges, bucket by bucket, off the training thread.
// The training thread hands a bucket over (launch) and collects the average one iteration later
// (wait); an encoder thread (error feedback, compression, the collective) and a decoder thread
// (waiting, decoding, averaging) run the rest in bucket order, on a communicator of their own.
// A lossy exchange sends a bucket whose values are not finite as zeros (nonfinite_buckets()).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm/comm_queue.h"
#include "dist/compress/gradient_exchange.h"
#include "dist/timeline.h"

namespace mt::dist {

// A contiguous range [offset, offset + numel) of the flat vector, exchanged as one message.
struct BucketRange {
  int64_t offset = 0;
  int64_t numel = 0;
};

// One iteration's exchange in flight. Sized at begin(); the worker threads write only their own
// bucket's slots, and the training thread reads them after waiting for that bucket's task.
struct PipelineIteration {
  bool full_precision = false;
  int64_t warm_up_iteration = -1;  // TOPK ratio warm-up: the delayed iteration; -1 = none
  Tensor average;                  // flat: every bucket's average, written by the decoder
  std::vector<std::shared_ptr<Work>> encoded, decoded;  // per bucket; null until launched
  std::vector<Tensor> own_decoded;                      // per bucket (momentum factor masking)
  std::vector<std::shared_ptr<PendingExchange>> exchanges;
  size_t launched = 0;
};

class ExchangePipeline {
 public:
  // `group`: the communicator the exchanges use (nothing else may use it meanwhile). `device`:
  // where payloads live (a CUDA device for NCCL; values are moved there and averages back).
  ExchangePipeline(std::shared_ptr<ProcessGroup> group, std::shared_ptr<const Compressor> compressor,
                   CompressionOptions options, std::vector<BucketRange> buckets, ExchangeRoute route,
                   std::chrono::milliseconds timeout, core::Device device = core::Device::cpu(),
                   std::shared_ptr<Timeline> timeline = nullptr);
  ~ExchangePipeline();  // waits for the tasks in flight (errors are dropped: nothing to tell)
  ExchangePipeline(const ExchangePipeline&) = delete;
  ExchangePipeline& operator=(const ExchangePipeline&) = delete;

  size_t buckets() const { return buckets_.size(); }
  const BucketRange& bucket(size_t b) const { return buckets_[b]; }
  int64_t numel() const { return numel_; }

  // Starts an iteration; then launch() every bucket in bucket order, the same on every rank.
  std::shared_ptr<PipelineIteration> begin(bool full_precision, int64_t warm_up_iteration);
  // Hands bucket b's values (numel of the bucket, float32, host) to the encoder and queues its
  // decoding; returns at once. `values` must not be written afterwards.
  void launch(const std::shared_ptr<PipelineIteration>& it, size_t b, Tensor values);
  // Blocks until every bucket of `it` is averaged (all launched first); returns the flat average.
  Tensor wait(PipelineIteration& it);
  // Blocks until bucket b of `it` is encoded; returns this rank's decoded payload (undefined for
  // a full-precision exchange). Momentum factor masking needs it before the bucket's next
  // velocity update.
  Tensor own_decoded(PipelineIteration& it, size_t b);
  // True when every bucket launched in `it` has finished encoding (no waiting; tests, counters).
  bool encoding_done(const PipelineIteration& it) const;
  // Waits for everything queued, so residuals and statistics can be read.
  void drain();

  // The residuals of all buckets as one flat host vector, and back (drain() first).
  Tensor residual() const;
  void set_residual(const Tensor& flat);
  const Compressor& compressor() const { return *compressor_; }
  ExchangeRoute route() const { return route_; }
  // Summed over the buckets since the last call; resets them (drain() first).
  ExchangeStats take_stats();
  int64_t nonfinite_buckets() const { return nonfinite_buckets_.load(); }

 private:
  void encode(PipelineIteration& it, size_t b, const Tensor& values);
  void decode(PipelineIteration& it, size_t b);

  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<const Compressor> compressor_;
  CompressionOptions options_;
  std::vector<BucketRange> buckets_;
  int64_t numel_ = 0;
  ExchangeRoute route_;
  core::Device device_;
  std::shared_ptr<Timeline> timeline_;
  std::vector<std::unique_ptr<GradientExchange>> exchanges_;  // per bucket
  std::atomic<int64_t> nonfinite_buckets_{0};
  std::shared_ptr<Work> last_encode_, last_decode_;
  // Last members: destroyed first, so no task outlives what it uses.
  std::unique_ptr<CommQueue> encoder_, decoder_;
};

}  // namespace mt::dist
