#include "dist/dlcp/dlcp_synchronizer.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstdlib>

#include "core/error.h"
#include "dist/comm/socket.h"
#include "dist/dlcp/ps_server.h"
#include "dist/dlcp/ps_worker.h"
#include "dist/registry.h"
#include "dist/flat.h"
#include "dist/ps/ps_handshake.h"
#include "dist/replicas.h"

namespace mt::dist::dlcp {

void validate_dlcp_config(const mintrain::DistConfig& d) {
  const mintrain::DlcpConfig& c = d.dlcp();
  MT_CHECK(c.loss_bound() >= 0 && c.loss_bound() <= 0.5, "dist.dlcp.loss_bound must be in [0, 0.5] (got ",
           c.loss_bound(), "): the fraction of an exchange's gradient contributions that may be lost");
  check_at_least("dist.dlcp.deadline_ms", c.deadline_ms(), 1);
  MT_CHECK(c.packet_bytes() >= int(kHeaderBytes) + 4 && c.packet_bytes() <= int(kMaxDatagramBytes),
           "dist.dlcp.packet_bytes must be in ", kHeaderBytes + 4, "..", kMaxDatagramBytes, " (got ", c.packet_bytes(),
           "): the datagram holds a ", kHeaderBytes, "-byte header and at least one value");
  MT_CHECK(c.inject_loss() >= 0 && c.inject_loss() <= 0.5, "dist.dlcp.inject_loss must be in [0, 0.5] (got ",
           c.inject_loss(), "): the fraction of data packets dropped on purpose, for experiments");
  check_at_least("dist.dlcp.partition_bytes", static_cast<double>(c.partition_bytes()), 4);
  // Each architecture has its own lossless second half; the other's field would be ignored.
  MT_CHECK(!(c.architecture() == "ring" && c.has_lossless_pull()), "dist.dlcp.lossless_pull applies to "
           "architecture \"ps\"; the ring's allgather is dist.dlcp.lossless_allgather");
  MT_CHECK(!(c.architecture() == "ps" && c.has_lossless_allgather()), "dist.dlcp.lossless_allgather applies to "
           "architecture \"ring\"; the parameter servers' pull is dist.dlcp.lossless_pull");
  // An address, or an interface name (resolved on each host when the job connects).
  for (int i = 0; i < c.paths_size(); ++i) {
    const std::string& p = c.paths(i);
    in_addr a{};
    const bool interface_name = !p.empty() && p.size() < IFNAMSIZ &&
                                p.find_first_of(" \t/:") == std::string::npos && p.find_first_not_of("0123456789.") != std::string::npos;
    MT_CHECK(::inet_pton(AF_INET, p.c_str(), &a) == 1 || interface_name, "dist.dlcp.paths[", i, "] \"", p,
             "\" is neither an IPv4 address (e.g. \"127.0.0.2\") nor a network interface's name (e.g. \"eth1\")");
  }
}

std::vector<std::string> local_paths_or_default(const std::vector<std::string>& paths) {
  if (!paths.empty()) {
    std::vector<std::string> addresses;
    for (const std::string& p : paths) addresses.push_back(path_address(p));
    return addresses;
  }
  const char* master = std::getenv("MASTER_ADDR");
  const std::string towards_master = net::local_address_towards(master && *master ? master : "127.0.0.1");
  return {towards_master.empty() ? "127.0.0.1" : towards_master};
}

DlcpOptions dlcp_options_from(const mintrain::DistConfig& d, int rank) {
  const mintrain::DlcpConfig& c = d.dlcp();
  DlcpOptions o;
  o.exchange.loss_bound = c.loss_bound();
  o.exchange.deadline = std::chrono::milliseconds(c.deadline_ms());
  o.exchange.timeout = std::chrono::seconds(d.timeout_seconds());
  o.exchange.elements_per_packet =
      static_cast<uint16_t>(std::min<int>((c.packet_bytes() - int(kHeaderBytes)) / 4, kMaxElementsPerPacket));
  o.exchange.spray = spray_from(c.spray());
  o.direction = priority_direction_from(c.priority_direction());
  o.error_feedback = c.error_feedback();
  o.lossless_allgather = c.lossless_allgather();
  o.lossless_pull = c.lossless_pull();
  o.partition_bytes = c.partition_bytes();
  for (const auto& p : c.paths()) o.paths.push_back(p);
  if (c.inject_loss() > 0) o.injector = random_loss(c.inject_loss(), 1 + static_cast<uint64_t>(rank));
  return o;
}

DlcpSynchronizer::DlcpSynchronizer(std::shared_ptr<ProcessGroup> group, DlcpOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  MT_CHECK(group_ != nullptr, "DLCP needs a process group");
  MT_CHECK(group_->backend() == "gloo", "dist.algorithm \"dlcp\" sends CPU gradients as datagrams; it runs with "
           "dist.backend \"gloo\" (got \"", group_->backend(), "\")");
  options_.paths = local_paths_or_default(options_.paths);
}

void DlcpSynchronizer::prepare_eval(layers::Module& model) {
  // Batch-norm statistics follow each rank's shard: every rank evaluates (and rank 0 saves) rank 0's.
  broadcast_buffers(*group_, model);
}

void DlcpSynchronizer::setup(layers::Module& model, optim::Optimizer& optimizer) {
  check_replicas_agree(*group_, model, options_.config_text);
  make_replicas_identical(*group_, model, {}, options_.log);
  params_ = optimizer.params();
  int64_t end = 0;
  std::vector<int64_t> numel;
  for (const Tensor& p : params_) {
    MT_CHECK(p.device().is_cpu(), "dist.algorithm \"dlcp\" exchanges CPU gradients; train on the CPU");
    end += p.numel();
    numel.push_back(p.numel());
  }
  MT_CHECK(end < int64_t(UINT32_MAX), "DLCP: ", end, " parameters exceed one transfer's 2^32 elements");
  layout_ = GradientLayout::of_parameters(numel, options_.direction);
  if (options_.error_feedback) residual_.assign(static_cast<size_t>(end), 0.0f);
  counts_.assign(static_cast<size_t>(end), 1);
  transport_ = connect_transport(*group_, options_.paths, options_.exchange, options_.injector);
}

bool DlcpSynchronizer::end_iteration(optim::StepGuard&) {
  Tensor flat = flatten_grads(params_);
  float* g = flat.data<float>();
  const uint32_t n = static_cast<uint32_t>(flat.numel());
  if (options_.error_feedback) {
    for (uint32_t i = 0; i < n; ++i) g[i] += residual_[i];
    std::fill(residual_.begin(), residual_.end(), 0.0f);
  }
  RingOptions ring;
  ring.layout = &layout_;
  ring.residual = options_.error_feedback ? residual_.data() : nullptr;
  ring.lossless_allgather = options_.lossless_allgather;
  const ExchangeStats stats = ring_allreduce(*transport_, group_->rank(), group_->size(), g, counts_.data(), n,
                                             static_cast<uint32_t>(iteration_), 0, ring);
  for (uint32_t i = 0; i < n; ++i) g[i] = counts_[i] > 0 ? g[i] / counts_[i] : 0.0f;
  unflatten_into_grads(flat, params_);
  record_.add(stats);
  return false;  // the trainer steps on the average
}

namespace {

std::unique_ptr<Synchronizer> make_dlcp(const AlgorithmContext& c) {
  const bool ps = c.dist.dlcp().architecture() == "ps";
  const std::shared_ptr<ProcessGroup>& world = ps ? c.world_with_servers : c.group;
  if (ps) {
    check_worker_world(*c.group, world.get(), "dist.dlcp.architecture \"ps\"");
  } else {
    MT_CHECK(c.world_with_servers == nullptr, "the job started parameter servers but dist.dlcp.architecture is "
             "\"ring\" (allreduce among the workers); set it to \"ps\" or start no servers");
  }
  DlcpOptions o = dlcp_options_from(c.dist, world->rank());
  static_cast<SynchronizerOptions&>(o) = c.common;
  if (o.injector && o.log)
    *o.log << "dlcp: dropping " << 100 * c.dist.dlcp().inject_loss() << "% of data packets on purpose "
           << "(dist.dlcp.inject_loss)" << std::endl;
  if (ps) return std::make_unique<DlcpPsSynchronizer>(c.group, c.world_with_servers, std::move(o));
  return std::make_unique<DlcpSynchronizer>(c.group, std::move(o));
}

// Architecture "ps": gradients as datagrams to and from the servers.
void serve_dlcp(const ServerContext& c) {
  DlcpServerOptions o;
  o.workers = c.workers;
  o.servers = c.servers;
  o.dlcp = dlcp_options_from(c.dist, c.world->rank());
  DlcpParameterServer(c.world, o).run(c.log);
}

}  // namespace
}  // namespace mt::dist::dlcp

MT_REGISTER_ALGORITHM(dlcp, {.validate = mt::dist::dlcp::validate_dlcp_config,
                             .make = mt::dist::dlcp::make_dlcp,
                             .names = {{"dlcp.priority_direction", {"output_first", "input_first"}},
                                       {"dlcp.spray", {"round_robin", "least_loaded"}},
                                       {"dlcp.architecture", {"ring", "ps"}}},
                             .serve = mt::dist::dlcp::serve_dlcp,
                             .servers_if = {"dlcp.architecture", {"ps"}}})
