// `mintrain launch`: starts the workers of one node, the way torchrun does.
//
//   mintrain launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]
//                   [--max-restarts R] [--grace S] [--stop-timeout S] [--nservers S] -- train CONFIG ...
//
// Forks N copies of this binary running the command after `--`, each with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and MINTRAIN_RESTART_COUNT set
// (RANK = K*N + local rank), and prefixes every line they print with "[rank R] ". When a worker
// exits non-zero the others get SIGTERM, then SIGKILL after --grace seconds. Then, while
// restarts are left (--max-restarts, default 0), the whole group starts again with
// MINTRAIN_RESTART_COUNT one higher (`train` then resumes from the newest checkpoint) and a
// fresh rendezvous port when the port was picked automatically; otherwise launch exits 1
// naming the rank and its status. A worker exiting 2 (usage error) or 3 (config error) failed
// for good: launch says the error is permanent, restarts nothing, whatever --max-restarts, and
// exits with that status.
// When the failed worker was waiting for others (a collective timed out), the ranks still
// running at that moment are named too ("1 (stopped)"), since they are the suspects.
// Ctrl-C / SIGTERM / SIGHUP (a dropped ssh session; forwarded as SIGTERM) to launch is forwarded
// to the workers (they share one process group apart from the terminal's, so the terminal does
// not signal them twice): they checkpoint and exit; after --stop-timeout seconds the stragglers
// get SIGKILL. launch then exits 128 + the signal it got and restarts nothing. A stop signal
// sent to one worker directly stops the job the same way: that worker exits 128 + it, the
// others stop with it (exit 143), and launch exits 128 + the signal the first of them reports,
// restarting nothing. Workers die with launch however it ends: each has PR_SET_PDEATHSIG
// SIGKILL, so even a SIGKILLed launch leaves no worker behind.
// --nservers S adds S parameter servers (dist.algorithm "ps") to the job, started by node 0 with
// the same command: ranks N..N+S-1 of a world of N+S (N = nnodes x nproc-per-node workers), with
// MINTRAIN_NUM_SERVERS=S everywhere and MINTRAIN_ROLE=server|worker; their lines read
// "[server s] ". Every node's launcher takes the same S (it counts the world). A server that
// fails stops the job as a worker does.
// Options are accepted as torchrun writes them too: `--nproc-per-node=2`, `--nproc_per_node 2`.
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
  double grace_seconds = 5.0;     // after a worker failed: between SIGTERM and SIGKILL
  double stop_timeout_seconds = 60.0;  // after an interrupt: for the workers to checkpoint
  int max_restarts = 0;           // restarts of the whole group after a worker failed
  int nservers = 0;               // parameter servers, started by node 0 (dist.algorithm "ps")
  std::vector<std::string> command;  // the worker's arguments (after `--`)
};

// Parses the arguments after `launch`; throws FlagError (apps/flags.h) on malformed ones.
LaunchOptions parse_launch_args(const std::vector<std::string>& argv);

// Runs the workers (executing `program`, normally /proc/self/exe) and returns launch's exit
// status: 0 when every worker succeeded, 128 + signal after a stop request (130 for SIGINT, 143
// for SIGTERM, 129 for SIGHUP), a worker's 2 or 3 after its permanent error, 1 when a worker
// failed and no restart was left.
int run_launch(const LaunchOptions& options, const std::string& program);

}  // namespace mt::apps
