// DLCP's parameter-server form, worker side (`dist.dlcp.architecture: "ps"`; the server is
// ps_server.h). The bytes take the parameter server's road (dist/ps/ps_partition.h: gradients cut
// into partitions spread over S servers by size) and DLCP's transport (transport.h): after
// backward a worker packs each server's slices into one buffer (ps_layout.h) and pushes the S
// buffers at once as datagrams, classed by layer and magnitude and sprayed over the paths; each
// server sums what arrived from the N workers, with per-element counts, under the bounded-loss
// rule; then the worker pulls the S sums, again as datagrams, divides each element by its count
// (0 where nothing arrived) and steps. With loss_bound 0 this is BSP-PS, and S-SGD.
//
// The pull waits for every packet (lossless_pull, the default), so every worker applies the
// same sums and the replicas stay identical: the ring's lossless_allgather, for the same reason.
// With error_feedback the values of push packets a server did not acknowledge are added to the
// next iteration's gradient.
//
// Control travels over Gloo, as in the Gloo parameter server: the handshake (ps_handshake.h),
// then before each iteration worker 0 sends every server {step, iteration} and at the end
// {stop}. Seams: setup (agree, broadcast, plan, transport over the world of workers and servers,
// handshake), begin_iteration (the command), step (push, pull, average, optimizer), prepare_eval
// (worker 0's batch-norm statistics), epoch_summary and metrics_fields (exchange_record.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/dlcp/dlcp_synchronizer.h"
#include "dist/dlcp/exchange_record.h"
#include "dist/dlcp/ps_layout.h"
#include "dist/ps/ps_handshake.h"
#include "dist/comm/process_group.h"
#include "dist/synchronizer.h"

namespace mt::dist::dlcp {

// What workers and servers must agree on, as text (connect_transport compares it on every rank).
std::string ps_agreement(const DlcpOptions& options);

class DlcpPsSynchronizer final : public Synchronizer {
 public:
  // `workers`: the N workers; `world`: workers then the S servers (server s is rank N + s).
  DlcpPsSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world, DlcpOptions options);
  ~DlcpPsSynchronizer() override;  // worker 0: tells the servers to stop (errors only logged)

  std::string name() const override { return "dlcp/ps"; }
  int servers() const { return world_->size() - workers_->size(); }

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  bool steps_on_gradient_average() const override { return true; }
  bool keeps_state_per_rank() const override { return false; }  // the residual restarts at zero
  std::string epoch_summary() override { return record_.epoch_summary(); }
  std::string metrics_fields() override { return record_.metrics_fields(); }

  // The exchange of step() without the optimizer: pushes `flat` (every parameter's gradient,
  // concatenated) and pulls the sums into it, with counts[i] the number of workers whose value
  // of element i is in its sum (both hold the parameters' total size). Between begin_iteration
  // and the next; every worker calls it.
  ExchangeStats push_pull(float* flat, uint16_t* counts);

  // Every iteration's push and pull together: the pushed packets a server did not acknowledge
  // count as missing (and each such push as a deadline ending), beside the pull's own.
  const ExchangeStats& total() const { return record_.total(); }
  const ExchangeStats& last_push() const { return last_push_; }
  const std::vector<ServerBuffer>& buffers() const { return buffers_; }
  const std::vector<float>& residual() const { return residual_; }  // error feedback (flat), else empty
  Transport& transport() { return *transport_; }

 private:
  std::string server(int s) const;

  std::shared_ptr<ProcessGroup> workers_, world_;
  DlcpOptions options_;
  std::shared_ptr<Transport> transport_;
  std::vector<Tensor> params_;
  std::vector<PsPartition> plan_;
  std::vector<ServerBuffer> buffers_;              // per server
  std::vector<std::vector<float>> push_, pull_;    // per server
  std::vector<std::vector<uint16_t>> pull_counts_; // per server
  std::vector<uint16_t> ones_;                     // a push's contributors: this worker alone
  std::vector<float> residual_;                    // error feedback, flat
  std::vector<uint16_t> counts_;                   // contributions per element, flat
  ServerCommands commands_;                        // worker 0's
  int64_t iteration_ = -1;  // from begin_iteration (once per micro-batch, the same number)
  bool set_up_ = false, failed_ = false;
  ExchangeRecord record_{options_.exchange.loss_bound, "in push and pull"};
  ExchangeStats last_push_, last_pull_;
};

}  // namespace mt::dist::dlcp
