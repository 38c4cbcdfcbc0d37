#include "dist/compress/gradient_exchange.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

GradientExchange::GradientExchange(std::shared_ptr<ProcessGroup> group,
                                   std::unique_ptr<Compressor> compressor, int64_t numel,
                                   core::Device device)
    : group_(std::move(group)), compressor_(std::move(compressor)), feedback_(numel, device) {}

GradientExchange::GradientExchange(std::shared_ptr<ProcessGroup> group,
                                   std::shared_ptr<const Compressor> compressor, int64_t numel,
                                   core::Device device)
    : group_(std::move(group)), compressor_(std::move(compressor)), feedback_(numel, device) {}

int break_even_world_size(double bits_per_value) {
  MT_CHECK(bits_per_value > 0, "internal: break-even world size of a payload of ", bits_per_value,
           " bits per value");
  return static_cast<int>(std::floor(64.0 / bits_per_value));
}

PendingExchange GradientExchange::launch(const Tensor& flat_grad, bool full_precision,
                                         Tensor* own_decoded) {
  PendingExchange e;
  e.compressor = compressor_;
  e.numel = feedback_.numel();
  e.full_precision = full_precision;
  Tensor decoded;  // this rank's own decoded payload (lossy exchanges)
  if (full_precision) {
    // The plain gradient; the residual waits for the next compressed exchange (CD-SGD's k-step
    // correction as its reference; sending g + r and clearing r trained worse, docs/PERF.md).
    e.payload = flat_grad.contiguous().reshape({e.numel}).clone();  // reduced in place
    e.summable = true;
  } else {
    e.summable = compressor_->summable();
    // The decoded values are written only where something reads them.
    const bool keep_decoded = own_decoded != nullptr || (!e.summable && route_ == ExchangeRoute::DecodeReduceScatter);
    e.payload = feedback_.compress(*compressor_, flat_grad, keep_decoded ? &decoded : nullptr);
    if (own_decoded) *own_decoded = decoded;
  }
  if (e.summable) {
    e.work = group_->allreduce(e.payload, ReduceOp::Sum);
  } else if (route_ == ExchangeRoute::DecodeReduceScatter) {
    // This rank's decoded values, padded to N equal shards: rank r sums shard r of every
    // rank's, then the summed shards are allgathered (both queued now; they run in order).
    const int64_t N = group_->size();
    const int64_t shard = (e.numel + N - 1) / N;
    Tensor dense = Tensor::zeros({shard * N}, core::DType::Float32, e.payload.device());
    dense.narrow(0, 0, e.numel).copy_(decoded);
    Tensor summed_shard = Tensor::empty({shard}, core::DType::Float32, e.payload.device());
    e.gathered = Tensor::empty({shard * N}, core::DType::Float32, e.payload.device());
    e.decoded_reduce = true;
    e.reduce_work = group_->reduce_scatter(dense, summed_shard);
    e.work = group_->allgather(summed_shard, e.gathered);
    stats_.bytes_sent += static_cast<double>(dense.numel() * 4) - static_cast<double>(e.payload.numel() *
                         core::element_size(e.payload.dtype()));  // the float32 values go, not the payload
  } else {
    e.gathered = Tensor::empty({e.payload.numel() * group_->size()}, e.payload.dtype(), e.payload.device());
    e.work = group_->allgather(e.payload, e.gathered);
  }
  ++stats_.exchanges;
  stats_.bytes_sent += static_cast<double>(e.payload.numel() * core::element_size(e.payload.dtype()));
  stats_.raw_bytes += static_cast<double>(e.numel) * 4.0;
  return e;
}

Tensor GradientExchange::wait(PendingExchange& e) {
  MT_CHECK(e.work != nullptr, "internal: waiting for a gradient exchange that was never launched");
  const auto start = std::chrono::steady_clock::now();
  if (e.reduce_work) {
    finish(e.reduce_work, *group_, "reduce-scatter of the decoded " + e.compressor->name() +
                                       " gradients (" + std::to_string(e.numel) + " values)");
    e.reduce_work.reset();
  }
  finish(e.work, *group_,
         std::string(e.full_precision ? "full-precision" : e.compressor->name()) +
             " gradient exchange (" + std::to_string(e.numel) + " values)");
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  e.work.reset();
  const float scale = 1.0f / static_cast<float>(group_->size());
  Tensor sum;
  if (e.decoded_reduce) {
    sum = e.gathered.narrow(0, 0, e.numel);
  } else if (e.summable) {
    sum = e.full_precision ? e.payload : e.compressor->decompress(e.payload, e.numel);
  } else {
    // Every rank decodes every rank's payload and sums them in rank order: the same floating
    // point additions everywhere, so all ranks get bit-identical averages. The sum is a new
    // tensor: scaled in place.
    Tensor avg = e.compressor->decompress_sum(e.gathered, group_->size(), e.numel);
    avg.mul_(scale);
    return avg;
  }
  Tensor avg = sum.contiguous().clone();
  avg.mul_(scale);
  return avg;
}

void GradientExchange::warm_up(const CompressionOptions& options, int64_t iteration) {
  if (options.type != "topk" || iteration >= options.topk_warmup_iters) return;
  // Those in flight keep theirs; every rank swaps at the same iteration (payload sizes must agree).
  compressor_ = make_topk_compressor(topk_ratio_at(options, iteration));
}

std::string describe_exchanges(const std::string& compressor, const ExchangeStats& stats, int64_t iterations) {
  if (stats.exchanges == 0) return "";
  const double it = static_cast<double>(std::max<int64_t>(1, iterations));
  return core::formatted("%s: %.1f KB sent per iteration (float32 %.1f KB, ratio %.1fx), waiting %.2f ms "
                         "per iteration on the exchange",
                         compressor.c_str(), stats.bytes_sent / it / 1024.0, stats.raw_bytes / it / 1024.0,
                         stats.bytes_sent > 0 ? stats.raw_bytes / stats.bytes_sent : 0.0,
                         stats.wait_seconds / it * 1e3);
}

}  // namespace mt::dist
