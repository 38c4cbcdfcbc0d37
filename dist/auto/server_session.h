// dist.algorithm "auto" with parameter servers (README.md): the servers stay for the whole run
// and wait for worker 0's session commands (dist/ps/ps_protocol.h): serve one parameter-server
// candidate until it stops, echo messages for the link measurement, idle while an allreduce
// candidate runs, end. Worker 0 speaks; every worker takes part in the measurement.
#pragma once
#include <chrono>
#include <memory>

#include "dist/comm/process_group.h"
#include "dist/predict/partition_cost_model.h"
#include "dist/registry.h"

namespace mt::dist {

// The workers' side. `workers`: the N workers; `world`: workers, then the S servers.
class ServerSession {
 public:
  ServerSession(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world);
  int servers() const { return world_->size() - workers_->size(); }

  // Worker 0, between iterations while no server candidate runs: an idle command when the
  // last command is over a second old, so the servers' wait never reaches its timeout.
  void keep_alive();
  // Worker 0, before a parameter-server candidate's set-up: the servers start serving it.
  void serve(int64_t partition_bytes);
  // Collective over the workers: each worker w sends a message to server w mod S and takes its
  // copy back, all at once (1 KiB .. max_bytes, skipping a size that would take over
  // max_seconds), and the round trips are fitted into the links the cost model prices pushes
  // and pulls with. Every worker returns the same links.
  PsLinks measure_links(double max_bytes, double max_seconds);
  // Worker 0 at the end (not after a failure): the servers exit. Errors are printed, not thrown.
  void end() noexcept;

 private:
  void command(int64_t kind, int64_t value, const std::string& what, int64_t exchanges = 0);  // worker 0 to every server

  std::shared_ptr<ProcessGroup> workers_, world_;
  std::chrono::steady_clock::time_point last_command_;
  bool failed_ = false;  // a server is gone: nothing more is sent
};

// The servers' side: what a server's process runs under dist.algorithm "auto", until worker 0
// ends the session; a silent worker 0 is an Error naming it.
void serve_auto_session(const ServerContext& context);

}  // namespace mt::dist
