// `mintrain launch`: starts the workers of one node, the way torchrun does.
//
//   mintrain launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
//                   -- train CONFIG ...
//
// Forks N copies of this binary running the command after `--`, each with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (RANK = K*N + local rank), and
// prefixes every line they print with "[rank R] ". When a worker exits non-zero the others get
// SIGTERM, then SIGKILL after a grace period, and launch exits non-zero naming that rank and its
// status. Ctrl-C / SIGTERM to launch is forwarded to the workers once (they run in their own
// process group so the terminal does not signal them twice).
#pragma once
#include <string>
#include <vector>

namespace mt::apps {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0: a free port (single node), 29500 with several nodes
  double grace_seconds = 5.0;     // between SIGTERM and SIGKILL
  std::vector<std::string> command;  // the worker's arguments (after `--`)
};

// Parses the arguments after `launch`; throws core::Error on malformed ones.
LaunchOptions parse_launch_args(const std::vector<std::string>& argv);

// Runs the workers (executing `program`, normally /proc/self/exe) and returns launch's exit
// status: 0 when every worker succeeded, 130 after an interrupt, 1 otherwise.
int run_launch(const LaunchOptions& options, const std::string& program);

}  // namespace mt::apps
