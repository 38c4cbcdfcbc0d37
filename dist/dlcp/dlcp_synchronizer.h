// DLCP as a data-parallel algorithm (README.md): S-SGD's BSP whose allreduce is DLCP's ring of
// UDP datagrams (ring_allreduce.h); each element's average divides by the ranks whose value
// arrived. The registration here builds the ring or the parameter-server form (ps_worker.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/dlcp/exchange_record.h"
#include "dist/dlcp/ring_allreduce.h"
#include "dist/dlcp/transport.h"
#include "dist/comm/process_group.h"
#include "dist/synchronizer.h"
#include "mintrain.pb.h"

namespace mt::dist::dlcp {

struct DlcpOptions : SynchronizerOptions {
  ExchangeOptions exchange;
  std::vector<std::string> paths;  // local addresses; empty = towards MASTER_ADDR
  PriorityDirection direction = PriorityDirection::OutputFirst;
  bool error_feedback = false;
  bool lossless_allgather = true;  // the ring
  bool lossless_pull = true;       // the parameter-server form (ps_worker.h)
  int64_t partition_bytes = 4 << 20;
  std::shared_ptr<PacketFaults> injector;  // tests, and dist.dlcp.inject_loss
};

// The options of a validated dist config (dist.timeout_seconds is the silence that fails) for
// world rank `rank`: with dist.dlcp.inject_loss, an injector that drops that fraction of its
// data packets (seeded by the rank).
DlcpOptions dlcp_options_from(const mintrain::DistConfig& dist, int rank = 0);
// Checks dist.dlcp; errors name the field.
void validate_dlcp_config(const mintrain::DistConfig& dist);
// The local addresses to send from: `paths` (interface names resolved on this host,
// path_address), or when empty the one that reaches MASTER_ADDR.
std::vector<std::string> local_paths_or_default(const std::vector<std::string>& paths);

class DlcpSynchronizer final : public Synchronizer {
 public:
  DlcpSynchronizer(std::shared_ptr<ProcessGroup> group, DlcpOptions options);

  std::string name() const override { return "dlcp/ring over UDP"; }
  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override { iteration_ = iteration; }
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;  // rank 0's batch-norm statistics, as S-SGD
  bool steps_on_gradient_average() const override { return true; }
  // A checkpoint holds rank 0's model (every rank resumes from it, on any number of ranks); the
  // error-feedback residual is not kept: a resumed run starts it at zero.
  bool keeps_state_per_rank() const override { return false; }
  std::string epoch_summary() override { return record_.epoch_summary(); }
  std::string metrics_fields() override { return record_.metrics_fields(); }

  const ExchangeStats& total() const { return record_.total(); }
  Transport& transport() { return *transport_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  DlcpOptions options_;
  std::shared_ptr<Transport> transport_;
  std::vector<Tensor> params_;
  GradientLayout layout_;
  std::vector<float> residual_;
  std::vector<uint16_t> counts_;
  int64_t iteration_ = 0;
  ExchangeRecord record_{options_.exchange.loss_bound, "in the ring"};
};

}  // namespace mt::dist::dlcp
