// Worker 0's set-up talk with the parameter servers (the wire is ps_protocol.h), shared by every
// algorithm that runs on servers (ps_synchronizer.h, bytescheduler_synchronizer.h, dlcp/ps_worker.h): worker 0
// greets each server with what the workers believe (workers, servers, partition_bytes, the
// server's index and its number of partitions), compares the answer, and sends the server its
// partition table. A mismatch is refused on both sides naming both values; the servers that
// agreed are then told to stop, and every worker learns the verdict from worker 0, so the whole
// job stops at set-up.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm/process_group.h"
#include "dist/ps/ps_partition.h"

namespace mt::dist {

// The int64 messages of the wire as tensors, and back.
Tensor int64s(const std::vector<int64_t>& v);
std::vector<int64_t> int64_values(const Tensor& t);

// One server's partitions in the order it serves them: {partition id, numel} each.
using PsServerTable = std::vector<std::pair<int64_t, int64_t>>;

// Collective over `workers`. `world`: workers then servers (server s is rank N+s); each server
// is sent its partitions of `plan`, numbered in plan order. `vote_numel` > 0 (ByteScheduler's
// vote): a partition of that many elements goes first, to server 0, as id 0, and the plan's ids
// start at 1. `first_id` shifts every id (auto: each server session its own ids, so its own
// tags). Throws an Error naming the server and the values on a refusal or a silent server.
void greet_parameter_servers(ProcessGroup& workers, ProcessGroup& world, const std::vector<PsPartition>& plan,
                             int64_t partition_bytes, int64_t vote_numel = 0, int64_t first_id = 0);

// The server's side (ps_server.h, dlcp/ps_server.h): waits for worker 0's hello, answers
// with what this server believes, and returns its partition table (in push order). A mismatch is
// an Error naming both values (worker 0 refuses too); a silent worker 0 is an Error naming it.
// `world`: workers then servers, this process being server `world.rank() - workers`.
PsServerTable answer_worker_hello(ProcessGroup& world, int workers, int servers, int64_t partition_bytes);

// On a worker: `world` (workers then servers) must exist, hold at least one server and have
// this worker at its own rank; `setting` names what asked for servers (`dist.algorithm "ps"`),
// and the error says how to start them.
void check_worker_world(const ProcessGroup& workers, const ProcessGroup* world, const std::string& setting);

// On worker `worker` (of `workers`): server `server` failed while `what`; throws the Error that
// names it (for the PS, ByteScheduler-PS and DLCP-PS workers alike).
[[noreturn]] void fail_server_gone(int worker, int workers, int server, const std::string& what, const std::exception& e);

// On server `server`: worker `worker` failed while `what`; throws the Error that names both (for
// every server's waits: the PS's, auto's session).
[[noreturn]] void fail_worker_gone(int server, int workers, int worker, const std::string& what, const std::exception& e);

// Runs f, which talks to server `server` while `what`; an error (a dead server breaks the pair at
// once, or a wait times out) sets `failed` (no stop message is sent at the end) and becomes
// fail_server_gone's.
template <typename F>
void with_server(bool& failed, int worker, int workers, int server, const std::string& what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    failed = true;
    fail_server_gone(worker, workers, server, what, e);
  }
}

// Worker 0's commands to the servers (ps_protocol.h: {kStep, iteration} before each iteration,
// {kStop, iterations} at the end), one in flight per server. A server gone is an Error naming it
// (fail_server_gone); after one, stop() sends nothing (the servers stop on their own).
class ServerCommands {
 public:
  ServerCommands() = default;
  ServerCommands(std::shared_ptr<ProcessGroup> world, int workers);  // world: workers then servers
  void send(int64_t kind, int64_t value);  // waits for the last command first
  void wait();                             // for the commands in flight
  void stop(int64_t iterations) noexcept;  // for destructors: a failure is printed, not thrown

 private:
  std::shared_ptr<ProcessGroup> world_;
  int workers_ = 0;
  int64_t last_ = -1;  // the last iteration announced
  bool failed_ = false;
  std::vector<Tensor> commands_;  // kept while in flight
  std::vector<std::shared_ptr<Work>> work_;
};

// "parameter server 1 (rank 5)"
std::string parameter_server_name(int server, int workers);
// "worker 2 (rank 2)"
std::string parameter_server_worker_name(int worker);

}  // namespace mt::dist
