// The synchronizations dist.algorithm "auto" chooses from, and the order the cost model puts
// them in. Only lossless ones: each steps every rank on the same average gradient, so switching
// between them mid-run changes the speed, never the training.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "dist/comm/link_cost.h"
#include "dist/predict/model_profile.h"
#include "dist/predict/partition_cost_model.h"
#include "mintrain.pb.h"

namespace mt::dist {

struct Candidate {
  std::string name;           // "ssgd/mgwfbp", "hierarchical/fusion", "bytescheduler/a2a"
  mintrain::DistConfig dist;  // what the registry builds for it
  int warmup_iters = 2;       // iterations after switching to it that are not timed
  double predicted = 0.0;     // seconds per iteration, from the cost model (rank_candidates)
  int64_t served_partition_bytes = 0;  // on the servers: the partition size they serve it with
};

// Every candidate this job can run: S-SGD's BSP, WFBP, FUSION and MG-WFBP; FUSION and MG-WFBP
// over the hierarchical allreduce when the racks are known (dist.ssgd.rack or ranks_per_rack);
// ByteScheduler on allreduce, and on the servers when the job started `servers`, unless the
// optimizer clips by the global norm (it steps layer by layer); the parameter server's BSP,
// WFBP and staggered schedules when the job started servers (with dist.ps's settings).
// dist.auto.candidates keeps the ones it names (an unknown or lossy name is an Error saying why).
std::vector<Candidate> candidates_for(const mintrain::DistConfig& dist, bool clips_gradients, int servers);
// The names candidates_for can give (for `mintrain help` and the errors).
std::vector<std::string> candidate_names();

// The network as the job measured it, per kind of allreduce (link_cost.h).
struct MeasuredNetwork {
  LinkCost flat;
  LinkCost hierarchical;  // the racks' allreduce, when there are racks
  PsLinks servers;        // the workers' links to the parameter servers, when there are servers
};

// Predicts each candidate's iteration time from the measured profile and network (the DAGs of
// dist/predict) and sorts them fastest first, equals in list order. Also hands each candidate
// what the measurement already knows: MG-WFBP the network's alpha and beta, ByteScheduler the
// credit the model finds fastest (so neither measures again when tried).
void rank_candidates(std::vector<Candidate>& candidates, const ModelProfile& profile, const MeasuredNetwork& network);

// Deciding again, the method in use is tried too: a switch must be measured faster than staying,
// under the same new conditions. Moves `incumbent` (a name; "" for none) just behind the first
// `tries` of `ranked` when it is not among them, and returns how many to try.
size_t with_incumbent(std::vector<Candidate>& ranked, size_t tries, const std::string& incumbent);

// The best of every family is tried: S-SGD's allreduce schedules, ByteScheduler, the parameter
// server. The model's misfit differs between them (its price of the PS's links moved 3x between
// runs on one testbed), and new contention loads their links differently. Moves each family's
// best not among the first `tries` of `ranked` just behind them, and returns how many to try.
size_t with_every_family(std::vector<Candidate>& ranked, size_t tries);

// Deciding again, the model's errors that the network does not explain (the parameter server's
// cost on shared cores) are still there: each prediction is scaled by `misfit` (a name's measured
// over predicted time in the first trials), else by its family's least, then ranked again.
void calibrate(std::vector<Candidate>& ranked, const std::map<std::string, double>& misfit);

}  // namespace mt::dist
