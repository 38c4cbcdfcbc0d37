// DLCP's parameter-server form, worker side (README.md): the PS plan's slices of each server in
// one buffer (ps_layout.h), pushed to the S servers at once as datagrams, the sums pulled back
// (lossless by default, so the replicas stay equal) and divided by their counts. Control (the
// handshake, the per-iteration commands) goes over Gloo as for the Gloo parameter server.
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
// The transport's options in this form: a lost push packet costs one contribution (a worker's
// values for its range), and so does a lost pull packet (one worker of N lacks the range's sum:
// N of the N x N contributions the workers apply). With a lossless pull the push may lose p;
// with a lossy one push and pull may each lose p / 2, so the two together stay within p.
ExchangeOptions ps_exchange_options(const DlcpOptions& options);

class DlcpPsSynchronizer final : public Synchronizer {
 public:
  // `workers`: the N workers; `world`: workers then the S servers (server s is rank N + s).
  DlcpPsSynchronizer(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world, DlcpOptions options);
  ~DlcpPsSynchronizer() override;  // worker 0: tells the servers to stop (errors only logged)

  std::string name() const override { return "dlcp/ps over UDP"; }
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
