#include "dist/gradient_exchange.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "dist/replicas.h"

namespace mt::dist {

GradientExchange::GradientExchange(std::shared_ptr<ProcessGroup> group,
                                   std::unique_ptr<Compressor> compressor, int64_t numel,
                                   core::Device device)
    : group_(std::move(group)), compressor_(std::move(compressor)), feedback_(numel, device) {}

PendingExchange GradientExchange::launch(const Tensor& flat_grad, bool full_precision,
                                         Tensor* own_decoded) {
  PendingExchange e;
  e.compressor = compressor_;
  e.numel = feedback_.numel();
  e.full_precision = full_precision;
  Tensor v = feedback_.corrected(flat_grad);
  if (full_precision) {
    e.payload = v;
    e.summable = true;
    feedback_.clear();
  } else {
    e.payload = compressor_->compress(v);
    e.summable = compressor_->summable();
    Tensor decoded = compressor_->decompress(e.payload, e.numel);
    feedback_.update(v, decoded);
    if (own_decoded) *own_decoded = decoded;
  }
  if (e.summable) {
    e.work = group_->allreduce(e.payload, ReduceOp::Sum);
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
  MT_CHECK(e.active(), "internal: waiting for a gradient exchange that was never launched");
  const auto start = std::chrono::steady_clock::now();
  finish(e.work, *group_,
         std::string(e.full_precision ? "full-precision" : e.compressor->name()) +
             " gradient exchange (" + std::to_string(e.numel) + " values)");
  stats_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  e.work.reset();
  const float scale = 1.0f / static_cast<float>(group_->size());
  Tensor sum;
  if (e.summable) {
    sum = e.full_precision ? e.payload : e.compressor->decompress(e.payload, e.numel);
  } else {
    // Every rank decodes every rank's payload and sums them in rank order: the same floating
    // point additions everywhere, so all ranks get bit-identical averages.
    const int64_t len = e.payload.numel();
    sum = Tensor::zeros({e.numel}, core::DType::Float32, e.payload.device());
    for (int r = 0; r < group_->size(); ++r)
      sum.add_(e.compressor->decompress(e.gathered.narrow(0, r * len, len).contiguous(), e.numel));
  }
  Tensor avg = sum.contiguous().clone();
  avg.mul_(scale);
  return avg;
}

void GradientExchange::warm_up(const CompressionOptions& options, int64_t iteration) {
  if (options.type != "topk" || iteration >= options.topk_warmup_iters) return;
  set_compressor(make_topk_compressor(topk_ratio_at(options, iteration)));
}

std::string describe_exchanges(const std::string& compressor, const ExchangeStats& stats, int64_t iterations) {
  if (stats.exchanges == 0) return "";
  const double it = static_cast<double>(std::max<int64_t>(1, iterations));
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%s: %.1f KB sent per iteration (float32 %.1f KB, ratio %.1fx), waiting %.2f ms "
                "per iteration on the exchange",
                compressor.c_str(), stats.bytes_sent / it / 1024.0, stats.raw_bytes / it / 1024.0,
                stats.bytes_sent > 0 ? stats.raw_bytes / stats.bytes_sent : 0.0, stats.wait_seconds / it * 1e3);
  return buf;
}

std::string GradientExchange::take_summary(int64_t iterations) {
  const std::string summary = describe_exchanges(compressor_->name(), stats_, iterations);
  stats_ = {};
  return summary;
}

}  // namespace mt::dist
