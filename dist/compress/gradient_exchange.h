// One compressed exchange of a flat gradient vector (compressed S-SGD and CD-SGD, one per bucket):
// launch() applies error feedback, compresses and enqueues the collective, returning at once;
// wait() returns the average over ranks of the decoded gradients. A full-precision exchange sends
// g as float32 and keeps r for the next compressed one (CD-SGD's k-step correction). Buffers live
// on the gradient's device.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dist/compress/compressor.h"
#include "dist/compress/error_feedback.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

// How a non-summable payload travels (summable ones and full-precision exchanges are always
// allreduced):
//   Allgather: every rank's payload to every rank, each decodes and sums all N (bytes per rank
//     grow with N: (N-1) payloads in);
//   DecodeReduceScatter: each rank sends its own decoded payload as float32 through a
//     reduce-scatter (each rank sums only its shard) and an allgather of the summed shards,
//     i.e. the bytes of a dense ring allreduce, whatever N. Cheaper past
//     break_even_world_size(); the sums are the same up to float addition order.
enum class ExchangeRoute { Allgather, DecodeReduceScatter };

// The world size past which allgathering payloads of `bits_per_value` moves more bytes per rank
// than a dense float32 ring allreduce: (N-1)·n·b/8 > 2·(N-1)/N·4n  <=>  N > 64/b (2-bit: 32).
int break_even_world_size(double bits_per_value);

struct PendingExchange {
  std::shared_ptr<Work> work;
  std::shared_ptr<Work> reduce_work;  // DecodeReduceScatter: the reduce-scatter before `work`
  std::shared_ptr<const Compressor> compressor;  // the one that encoded it (TOPK warm-up swaps)
  Tensor payload;      // this rank's payload (summable: reduced in place)
  Tensor gathered;     // allgather output: every rank's payload, in rank order (or, with
                       // DecodeReduceScatter, the summed float32 shards: the sum, padded)
  bool full_precision = false;
  bool summable = true;
  bool decoded_reduce = false;  // went the DecodeReduceScatter route
  int64_t numel = 0;
};

// Per-epoch communication statistics (rank-local).
struct ExchangeStats {
  int64_t exchanges = 0;
  double bytes_sent = 0;    // this rank's payload bytes
  double raw_bytes = 0;     // float32 bytes of the same gradients
  double wait_seconds = 0;  // blocked in wait()
};

// "TWO_BIT(tau=0.5): 12.3 KB sent per iteration (float32 196 KB, ratio 16.0x), waiting 0.8 ms
// per iteration on the exchange"; "" when nothing was exchanged. Also for several exchanges'
// summed statistics (one per bucket).
std::string describe_exchanges(const std::string& compressor, const ExchangeStats& stats, int64_t iterations);

class GradientExchange {
 public:
  GradientExchange(std::shared_ptr<ProcessGroup> group, std::unique_ptr<Compressor> compressor,
                   int64_t numel, core::Device device = core::Device::cpu());
  // One compressor shared by several exchanges (compressors keep no state: CD-SGD's buckets).
  GradientExchange(std::shared_ptr<ProcessGroup> group, std::shared_ptr<const Compressor> compressor,
                   int64_t numel, core::Device device = core::Device::cpu());

  // own_decoded (optional): this rank's decoded payload, for momentum factor masking; left
  // undefined for a full-precision exchange.
  PendingExchange launch(const Tensor& flat_grad, bool full_precision, Tensor* own_decoded = nullptr);
  Tensor wait(PendingExchange& exchange);

  const Compressor& compressor() const { return *compressor_; }
  // TOPK ratio warm-up: during options.topk_warmup_iters, exchanges from now on use the ratio of
  // `iteration` (topk_ratio_at); a no-op for other compressors and after the warm-up.
  void warm_up(const CompressionOptions& options, int64_t iteration);
  // Non-summable payloads from now on go this way (default Allgather).
  void set_route(ExchangeRoute route) { route_ = route; }
  ExchangeRoute route() const { return route_; }
  ErrorFeedback& error_feedback() { return feedback_; }
  ExchangeStats& stats() { return stats_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<const Compressor> compressor_;
  ErrorFeedback feedback_;
  ExchangeStats stats_;
  ExchangeRoute route_ = ExchangeRoute::Allgather;
};

}  // namespace mt::dist
