// Builds the Synchronizer a run asks for (config: RunConfig.dist, see configs/mintrain.proto).
// The trainer translates the protobuf message into SyncConfig, so dist/ does not depend on the
// config library.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/cost_model.h"
#include "dist/process_group.h"
#include "dist/synchronizer.h"
#include "dist/timeline.h"

namespace mt::dist {

struct SyncConfig {
  std::string algorithm = "ssgd";
  std::string schedule = "fusion";
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  int profile_iters = 5;
  double alpha = -1.0;  // < 0: measure
  double beta = -1.0;
  double gamma = 0.0;   // with alpha and beta given: compute lost per message (cost_model.h)
  std::optional<LinearCost> cost;  // MGWFBP: a measured cost to plan with (dist.comm_profile)
  std::string cost_source;         // where it came from, for the log
  int grad_accumulation_steps = 1;
  // DS-Sync (algorithm "dssync"; see dssync_synchronizer.h and DistConfig).
  int dssync_group_size = 2;
  std::string dssync_schedule = "butterfly";
  int dssync_cross_period = 1;
  std::vector<int> dssync_rack;     // rack id per rank; empty = by ranks_per_rack or one rack
  int dssync_ranks_per_rack = 0;
  int dssync_global_average_every = 0;
  uint64_t dssync_seed = 0;
  int dssync_pool_size = 16;
  int dssync_spread_every = 0;
  bool dssync_measure_racks = false;
  // CD-SGD and compressed S-SGD (algorithm "cdsgd", or "ssgd" with a compression; see
  // cdsgd_synchronizer.h, compressor.h and DistConfig).
  std::string compression = "none";
  double compression_tau = 0.5;
  double topk_ratio = 0.01;
  int cdsgd_warmup_iters = 100;
  int cdsgd_k = 5;
  double cdsgd_lambda = 0.04;
  // DGC momentum correction and TOPK ratio warm-up (momentum_correction.h, DistConfig).
  bool momentum_correction = true;  // used with optimizer "sgd" and momentum > 0
  int topk_warmup_iters = 0;
  // The optimizer's settings: momentum correction takes the momentum over from it.
  std::string optimizer_name = "sgd";
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  std::string config_text;               // checked equal on every rank
  std::shared_ptr<Timeline> timeline;    // optional
  std::ostream* log = nullptr;           // rank 0's start-up notes
};

std::vector<std::string> synchronizer_names();  // "ssgd", ...

// group == nullptr or a world of one with algorithm "ssgd" still builds the S-SGD synchronizer
// when a group is given; without a group the result is the LocalSynchronizer.
std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group,
                                                const SyncConfig& config);

}  // namespace mt::dist
