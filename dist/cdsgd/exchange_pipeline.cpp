#include "dist/cdsgd/exchange_pipeline.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mt::dist {

namespace {

bool all_finite(const Tensor& host) {
  const float* v = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

}  // namespace

ExchangePipeline::ExchangePipeline(std::shared_ptr<ProcessGroup> group,
                                   std::shared_ptr<const Compressor> compressor,
                                   CompressionOptions options, std::vector<BucketRange> buckets,
                                   ExchangeRoute route, std::chrono::milliseconds timeout,
                                   core::Device device, std::shared_ptr<Timeline> timeline)
    : group_(std::move(group)), compressor_(std::move(compressor)), options_(std::move(options)),
      buckets_(std::move(buckets)), route_(route), device_(device), timeline_(std::move(timeline)) {
  MT_CHECK(group_ != nullptr && compressor_ != nullptr, "internal: exchange pipeline without a group or compressor");
  for (const auto& b : buckets_) {
    numel_ += b.numel;
    exchanges_.push_back(std::make_unique<GradientExchange>(group_, compressor_, b.numel, device_));
    exchanges_.back()->set_route(route_);
  }
  // The buckets tile [0, numel) without overlap, in any order (CD-SGD's run backwards).
  std::vector<BucketRange> sorted = buckets_;
  std::sort(sorted.begin(), sorted.end(), [](const BucketRange& a, const BucketRange& b) { return a.offset < b.offset; });
  int64_t expect = 0;
  for (const auto& b : sorted) {
    MT_CHECK(b.offset == expect && b.numel > 0, "internal: exchange pipeline buckets must tile the flat vector "
             "(a bucket at ", b.offset, " of ", b.numel, " values, expected one at ", expect, ")");
    expect += b.numel;
  }
  const std::string who = "rank " + std::to_string(group_->rank()) + " of " + group_->describe();
  encoder_ = std::make_unique<CommQueue>(who + ", CD-SGD encoder thread", timeout);
  decoder_ = std::make_unique<CommQueue>(who + ", CD-SGD decoder thread", timeout);
}

ExchangePipeline::~ExchangePipeline() {
  try {
    drain();
  } catch (const std::exception&) {
    // A broken group was reported where it was waited for; the queues still shut down.
  }
}

std::shared_ptr<PipelineIteration> ExchangePipeline::begin(bool full_precision, int64_t warm_up_iteration) {
  auto it = std::make_shared<PipelineIteration>();
  it->full_precision = full_precision;
  it->warm_up_iteration = warm_up_iteration;
  it->average = Tensor::zeros({numel_});
  it->encoded.resize(buckets_.size());
  it->decoded.resize(buckets_.size());
  it->own_decoded.resize(buckets_.size());
  it->exchanges.resize(buckets_.size());
  return it;
}

void ExchangePipeline::launch(const std::shared_ptr<PipelineIteration>& iteration, size_t b, Tensor values) {
  PipelineIteration& it = *iteration;
  MT_CHECK(b == it.launched, "internal: CD-SGD bucket ", b, " launched out of order (next is ", it.launched,
           "); every rank must issue the buckets in the same order");
  MT_CHECK(values.numel() == buckets_[b].numel, "internal: CD-SGD bucket ", b, " of ", buckets_[b].numel,
           " values got ", values.numel());
  ++it.launched;
  // The tasks hold the iteration alive; `this` outlives them (the destructor drains).
  std::shared_ptr<PipelineIteration> held = iteration;
  const std::string name = "bucket " + std::to_string(b) + " (" + std::to_string(buckets_[b].numel) + " values)";
  it.encoded[b] = last_encode_ =
      encoder_->enqueue("encoding of " + name, [this, held, b, values] { encode(*held, b, values); });
  it.decoded[b] = last_decode_ =
      decoder_->enqueue("decoding of " + name, [this, held, b] { decode(*held, b); });
}

void ExchangePipeline::encode(PipelineIteration& it, size_t b, const Tensor& values) {
  const auto start = Timeline::Clock::now();
  GradientExchange& ex = *exchanges_[b];
  if (it.warm_up_iteration >= 0) ex.warm_up(options_, it.warm_up_iteration);
  Tensor v = values;
  // Lossy only: a NaN would stay in the residual for good. A full-precision exchange leaves the
  // residual alone and carries the NaN to every rank's average, whose guard skips the step everywhere.
  if (!it.full_precision && !all_finite(v)) {
    ++nonfinite_buckets_;
    v = Tensor::zeros({v.numel()});
  }
  if (v.device() != device_) v = v.to(device_);
  Tensor own;
  auto pending = std::make_shared<PendingExchange>(ex.launch(v, it.full_precision, &own));
  it.own_decoded[b] = own.defined() && own.device() != core::Device::cpu() ? own.to(core::Device::cpu()) : own;
  it.exchanges[b] = std::move(pending);
  if (timeline_)
    timeline_->add("encode bucket " + std::to_string(b), Timeline::kComm, start, Timeline::Clock::now());
}

void ExchangePipeline::decode(PipelineIteration& it, size_t b) {
  it.encoded[b]->wait();  // the encoder's errors come out here too
  const auto start = Timeline::Clock::now();
  Tensor avg = exchanges_[b]->wait(*it.exchanges[b]);
  it.average.narrow(0, buckets_[b].offset, buckets_[b].numel).copy_(avg);
  it.exchanges[b].reset();  // the payload buffers
  if (timeline_)
    timeline_->add("decode bucket " + std::to_string(b), Timeline::kComm, start, Timeline::Clock::now());
}

Tensor ExchangePipeline::wait(PipelineIteration& it) {
  MT_CHECK(it.launched == buckets_.size(), "internal: waiting for a CD-SGD exchange with ", it.launched,
           " of ", buckets_.size(), " buckets launched");
  for (auto& w : it.decoded) w->wait();
  return it.average;
}

Tensor ExchangePipeline::own_decoded(PipelineIteration& it, size_t b) {
  MT_CHECK(it.encoded[b] != nullptr, "internal: CD-SGD bucket ", b, " was never launched");
  it.encoded[b]->wait();
  return it.own_decoded[b];
}

bool ExchangePipeline::encoding_done(const PipelineIteration& it) const {
  for (const auto& w : it.encoded)
    if (w && !w->is_completed()) return false;
  return true;
}

void ExchangePipeline::drain() {
  if (last_encode_) last_encode_->wait();
  if (last_decode_) last_decode_->wait();
}

Tensor ExchangePipeline::residual() const {
  Tensor flat = Tensor::zeros({numel_});
  for (size_t b = 0; b < buckets_.size(); ++b)
    flat.narrow(0, buckets_[b].offset, buckets_[b].numel).copy_(exchanges_[b]->error_feedback().residual());
  return flat;
}

void ExchangePipeline::set_residual(const Tensor& flat) {
  MT_CHECK(flat.numel() == numel_, "checkpoint: the CD-SGD residual holds ", flat.numel(), " values, the model ", numel_);
  const Tensor f = flat.contiguous().reshape({numel_});
  for (size_t b = 0; b < buckets_.size(); ++b)
    exchanges_[b]->error_feedback().residual().copy_(f.narrow(0, buckets_[b].offset, buckets_[b].numel));
}

ExchangeStats ExchangePipeline::take_stats() {
  ExchangeStats sum;
  for (auto& ex : exchanges_) {
    const ExchangeStats& s = ex->stats();
    sum.exchanges += s.exchanges;
    sum.bytes_sent += s.bytes_sent;
    sum.raw_bytes += s.raw_bytes;
    sum.wait_seconds += s.wait_seconds;
    ex->stats() = {};
  }
  return sum;
}

}  // namespace mt::dist
