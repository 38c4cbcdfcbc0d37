// `mintrain profile-comm`: measures the communication side of the cost model on the machines
// and network at hand (dist/predict/comm_profile.h) and writes it for `mintrain model
// --comm-profile`.
//
//   mintrain launch --nproc-per-node N -- profile-comm [--out FILE.json] [--sizes 256,2048,...]
//                   [--repeats R] [--seconds-per-size S] [--max-repeats R] [--no-gamma]
//                   [--gamma-rounds K] [--gamma-messages M] [--gamma-chunk-ms X] [--interface IF]
//                   [--transport tcp] [--timeout-seconds S] [--threads T]
//
// Every rank runs it, as a worker of `mintrain launch`, torchrun, srun or mpirun (the same
// environment `mintrain train` reads; dist/rendezvous.h), so it needs at least 2 ranks. It
// measures on the CPU through Gloo: the timed allreduces of each size, alpha and beta fitted on
// rank 0's mean time per size (shared by all ranks), and gamma, the compute a message sent
// during computation takes from the training thread. Rank 0 prints a table and, with --out,
// writes the JSON of dist::comm_profile_json.
//
// Why per-hop latency is not a flag here: on real clusters and on emulated testbeds the start-up
// cost of a message is mostly software (scheduling, wake-ups, the transport's protocol), which
// only a measurement sees.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "dist/predict/comm_profile.h"

namespace mt::apps {

// The readable summary of a profile (rank 0 prints it): per size the number of runs, the mean and fastest time,
// the fit and the effective allreduce bandwidth; then alpha, beta, gamma.
std::string comm_profile_table(const dist::CommProfile& profile);

// The subcommand; args exclude "profile-comm". Returns the exit status (errors throw core::Error).
int run_profile_comm_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace mt::apps
