#include "dist/dlcp/ps_worker.h"

#include <algorithm>
#include <iostream>
#include <numeric>

#include "core/error.h"
#include "core/strings.h"
#include "dist/registry.h"
#include "dist/flat.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"
#include "dist/replicas.h"

namespace mt::dist::dlcp {

std::string ps_agreement(const DlcpOptions& o) {
  return core::formatted("ps values_per_packet=%d loss_bound=%.9g deadline_ms=%lld lossless_pull=%d",
                         int(o.exchange.elements_per_packet), o.exchange.loss_bound,
                         static_cast<long long>(o.exchange.deadline.count()), int(o.lossless_pull));
}

ExchangeOptions ps_exchange_options(const DlcpOptions& o) {
  ExchangeOptions e = o.exchange;
  if (!o.lossless_pull) e.loss_bound /= 2;
  return e;
}

DlcpPsSynchronizer::DlcpPsSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world,
                                       DlcpOptions options)
    : workers_(std::move(workers)), world_(std::move(world)), options_(std::move(options)) {
  MT_CHECK(workers_ != nullptr, "DLCP's parameter-server form needs the workers' process group");
  check_worker_world(*workers_, world_.get(), "dist.dlcp.architecture \"ps\"");
  MT_CHECK(world_->backend() == "gloo", "dist.algorithm \"dlcp\" sends CPU gradients as datagrams; it runs with "
           "dist.backend \"gloo\" (got \"", world_->backend(), "\")");
  check_at_least("dist.dlcp.partition_bytes", static_cast<double>(options_.partition_bytes), 4);
  options_.paths = local_paths_or_default(options_.paths);
}

DlcpPsSynchronizer::~DlcpPsSynchronizer() {
  // After a failed exchange the servers are gone or stop on their own (their waits time out).
  if (set_up_ && !failed_ && workers_->rank() == 0) commands_.stop(iteration_ + 1);
}

std::string DlcpPsSynchronizer::server(int s) const { return parameter_server_name(s, workers_->size()); }

void DlcpPsSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  params_ = optimizer.params();
  check_replicas_agree(*workers_, model, options_.config_text);
  make_replicas_identical(*workers_, model, {}, options_.log);
  std::vector<int64_t> numel;
  for (const Tensor& p : params_) {
    MT_CHECK(p.device().is_cpu() && p.dtype() == core::DType::Float32, "dist.algorithm \"dlcp\" exchanges float32 "
             "CPU gradients; parameter ", numel.size(), " is ", p.str(), " (train on the CPU)");
    numel.push_back(p.numel());
  }
  // Push order: backward order, which for a sequential model is reverse registration order.
  std::vector<size_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), size_t{0});
  plan_ = plan_partitions(numel, order, options_.partition_bytes, servers());
  buffers_ = server_buffers(plan_, numel, servers(), options_.direction);

  // The datagram endpoints of every worker and server (collective over the world), then the
  // servers' handshake over Gloo.
  failed_ = true;  // until the handshake is through, no stop message
  transport_ = connect_transport(*world_, options_.paths, ps_exchange_options(options_), options_.injector,
                                 ps_agreement(options_));
  const int N = workers_->size();
  for (int s = 0; s < servers(); ++s) transport_->endpoint().set_peer_name(N + s, server(s));
  greet_parameter_servers(*workers_, *world_, plan_, options_.partition_bytes);
  failed_ = false;

  uint32_t largest = 0;
  for (const ServerBuffer& b : buffers_) {
    push_.emplace_back(b.elements);
    pull_.emplace_back(b.elements);
    pull_counts_.emplace_back(b.elements);
    largest = std::max(largest, b.elements);
  }
  ones_.assign(largest, 1);
  if (options_.error_feedback) residual_.assign(static_cast<size_t>(total_numel(params_)), 0.0f);
  counts_.assign(static_cast<size_t>(total_numel(params_)), 0);
  commands_ = ServerCommands(world_, workers_->size());
  if (workers_->rank() == 0 && options_.log) {
    *options_.log << "dlcp: parameter-server form, " << servers() << " servers, "
                  << describe_plan(plan_, servers(), options_.partition_bytes) << ", " << ps_agreement(options_)
                  << std::endl;
  }
  set_up_ = true;
}

void DlcpPsSynchronizer::begin_iteration(int64_t iteration) {
  // Called once per micro-batch with the same number: the servers hear of each iteration once.
  if (iteration != iteration_ && workers_->rank() == 0) commands_.send(ps::kStep, iteration);
  iteration_ = iteration;
}

ExchangeStats DlcpPsSynchronizer::push_pull(float* flat, uint16_t* counts) {
  MT_CHECK(set_up_, "DLCP parameter-server form: an exchange before setup()");
  MT_CHECK(iteration_ >= 0, "DLCP parameter-server form: an exchange without begin_iteration() (the servers learn "
           "of each iteration from it)");
  const int N = workers_->size();
  const uint32_t iteration = static_cast<uint32_t>(iteration_);
  const uint16_t per_packet = options_.exchange.elements_per_packet;

  // Push: every server's buffer at once, classed and sprayed as the ring's packets; the bucket
  // field says which server's buffer a packet belongs to.
  std::vector<OutgoingTransfer> pushes(static_cast<size_t>(servers()));
  for (int s = 0; s < servers(); ++s) {
    const ServerBuffer& b = buffers_[static_cast<size_t>(s)];
    float* buffer = push_[static_cast<size_t>(s)].data();
    gather(b, flat, buffer);
    OutgoingTransfer& out = pushes[static_cast<size_t>(s)];
    out.peer = N + s, out.iteration = iteration, out.bucket = static_cast<uint16_t>(s);
    out.values = buffer, out.elements = b.elements;
    classify_packets(&b.layout, buffer, ones_.data(), 0, b.elements, per_packet, mean_abs(buffer, b.elements), &out);
  }
  std::vector<std::vector<uint32_t>> unacknowledged;
  try {
    last_push_ = transport_->exchange_all(pushes, {}, false, &unacknowledged);
  } catch (const std::exception& e) {
    failed_ = true;
    MT_FAIL("worker ", workers_->rank(), ": pushing iteration ", iteration_, " to the parameter servers: ", e.what());
  }
  ExchangeStats stats = last_push_;
  for (int s = 0; s < servers(); ++s) {
    const ServerBuffer& b = buffers_[static_cast<size_t>(s)];
    const TransferShape shape{b.elements, per_packet};
    const std::vector<uint32_t>& lost = unacknowledged[static_cast<size_t>(s)];
    stats.packets_expected += shape.packets();
    stats.packets_missing += lost.size();
    stats.contributions += shape.packets();
    stats.contributions_lost += lost.size();
    stats.deadline_endings += lost.empty() ? 0 : 1;
    if (residual_.empty()) continue;
    const float* buffer = push_[static_cast<size_t>(s)].data();
    for (uint32_t p : lost)
      for_each_piece(b, shape.offset_of(p), shape.offset_of(p) + shape.count_of(p),
                     [&](int64_t flat_at, uint32_t at, uint32_t n) {
                       for (uint32_t i = 0; i < n; ++i) residual_[static_cast<size_t>(flat_at + i)] += buffer[at + i];
                     });
  }

  // Pull: every server's sums and counts at once; lossless by default (the replicas stay equal).
  std::vector<IncomingTransfer> pulls(static_cast<size_t>(servers()));
  for (int s = 0; s < servers(); ++s) {
    IncomingTransfer& in = pulls[static_cast<size_t>(s)];
    in.peer = N + s, in.iteration = iteration, in.elements = buffers_[static_cast<size_t>(s)].elements;
    in.values = pull_[static_cast<size_t>(s)].data(), in.counts = pull_counts_[static_cast<size_t>(s)].data();
    in.mode = WriteMode::Overwrite;
  }
  try {
    last_pull_ = transport_->exchange_all({}, pulls, options_.lossless_pull);
  } catch (const std::exception& e) {
    failed_ = true;
    MT_FAIL("worker ", workers_->rank(), ": pulling iteration ", iteration_, " from the parameter servers: ", e.what());
  }
  stats.add(last_pull_);
  stats.contributions -= last_pull_.contributions;  // this worker's share: its pushed packets
  for (int s = 0; s < servers(); ++s) {
    const ServerBuffer& b = buffers_[static_cast<size_t>(s)];
    scatter(b, pull_[static_cast<size_t>(s)].data(), flat);
    for (const ServerSlice& slice : b.slices) {
      const uint16_t* from = pull_counts_[static_cast<size_t>(s)].data() + slice.buffer_begin;
      std::copy(from, from + slice.numel, counts + slice.flat_begin);
    }
  }
  if (workers_->rank() == 0) commands_.wait();
  return stats;
}

bool DlcpPsSynchronizer::end_iteration(optim::StepGuard&) {
  Tensor flat = flatten_grads(params_);
  float* g = flat.data<float>();
  if (!residual_.empty()) {
    for (size_t i = 0; i < residual_.size(); ++i) g[i] += residual_[i];
    std::fill(residual_.begin(), residual_.end(), 0.0f);
  }
  const ExchangeStats stats = push_pull(g, counts_.data());
  // The average over the workers whose values arrived, element by element (0 where none did).
  for (size_t i = 0; i < counts_.size(); ++i) g[i] = counts_[i] > 0 ? g[i] / counts_[i] : 0.0f;
  unflatten_into_grads(flat, params_);
  record_.add(stats);
  return false;  // the trainer steps on the average
}

void DlcpPsSynchronizer::prepare_eval(layers::Module& model) {
  // Batch-norm statistics are each worker's own; evaluation and checkpoints use worker 0's.
  broadcast_buffers(*workers_, model);
}

}  // namespace mt::dist::dlcp
