// Who am I in the job: torchrun's variables (also set by `mintrain launch`), else Slurm's, else
// Open MPI's; none means one process. Parameter servers are the last ranks of the same world:
// MINTRAIN_NUM_SERVERS=S makes ranks N..N+S-1 the servers (MINTRAIN_ROLE, when set, must agree).
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "dist/comm/process_group.h"
#include "dist/comm/store.h"

namespace mt::dist {

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "torchrun", "slurm", "mpi", "none"
  int servers = 0;               // parameter servers among the world_size ranks (the last ones)

  int workers() const { return world_size - servers; }
  bool is_server() const { return rank >= workers(); }
  int server_index() const { return rank - workers(); }  // 0..servers-1 on a server
};

WorldInfo world_from_env();

// Connects to (rank 0: hosts) the TCP store at master_addr:master_port, waits for all ranks
// (naming the missing ones on timeout), and creates the world process group. While it waits,
// a line on stderr every `report_every` says for whom and how long, e.g. "rank 1: waiting for
// rank 0 at 10.0.0.1:29500, 30/300 s (Connection refused)", so a wrong MASTER_PORT or a rank
// that never started shows long before the timeout's error.
struct Rendezvous {
  WorldInfo world;
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> group;
};
// When `stop` turns true (a signal), waiting ends at once with core::Interrupted.
Rendezvous rendezvous(const WorldInfo& world, const ProcessGroupOptions& options,
                      std::chrono::milliseconds report_every = std::chrono::seconds(30),
                      const std::atomic<bool>* stop = nullptr);

}  // namespace mt::dist
