// Predicted iteration times for N workers from a model's profile (model_profile.h) and a
// network (network_model.h): S-SGD's four schedules (cost_model.h), CD-SGD, DS-Sync, the
// parameter server and ByteScheduler (partition_cost_model.h), one row per N; and the network
// that communication profiles imply.
//
// A communication profile (comm_profile_file.h; `mintrain profile-comm` writes it) calibrates
// the network with what was measured on n = "world" ranks with Gloo's ring allreduce,
// T(M) = alpha + beta * M, and gamma:
//   latency    per hop alpha / (2(n-1)), for every link (it replaces --latency-us and
//              --inter-latency-us): the start-up cost that software and scheduling add, which no
//              nominal latency describes;
//   bandwidth  with --bandwidth-gbps (or dist.network.bandwidth_gbps): every link's bandwidth,
//              inside and between racks, times the efficiency e = nominal ring beta at n / measured
//              beta (the share of the nominal rate the ring achieved), e clamped to (0, 1.5];
//              without: one level of 2(n-1)/n / beta bytes/s, the link rate the ring achieved;
//   gamma      seconds of compute each message sent during backward costs; it goes into every
//              S-SGD prediction with N >= 2 (a property of the host, not of N; BSP sends after
//              backward and so never pays it; N = 1 sends nothing).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dist/predict/comm_profile_file.h"
#include "dist/predict/cost_model.h"
#include "dist/predict/dssync_comm_profile.h"
#include "dist/predict/model_profile.h"
#include "dist/predict/network_model.h"

namespace mt::dist {

// The algorithms' settings the prediction uses, from config.dist.
struct AlgorithmSettings {
  double bucket_cap_mb = 25.0, first_bucket_cap_mb = 1.0;        // FUSION
  CdsgdCost cdsgd_per_exchange;  // compress/decode seconds and cdsgd_k (network parts unset)
  double cdsgd_payload_bytes = 0.0;    // one rank's compressed payload
  bool cdsgd_summable = true;          // allreduce (true) or allgather
  std::string compression = "none";
  int dssync_group_size = 2, dssync_cross_period = 1, dssync_global_average_every = 0;
  bool dssync_rack_aware = false;      // the config names the racks
  // The network as profile-comm measured it on `measured_world` ranks (0: no profile): its gamma
  // and overlap_slowdown enter every S-SGD prediction at N >= 2, and at N = measured_world the
  // ring's cost follows its measured curves (back to back, after idling, during compute) instead
  // of the line (LinearCost). Its own alpha and beta are not used here: the network model
  // was calibrated from them.
  int measured_world = 0;
  LinearCost measured;
  // Every profile's measured curves by the N it was measured on (several with --comm-profile
  // A,B: profiles at other N calibrate the network, and each one's curves apply at its own N).
  std::map<int, LinearCost> curves_at;
  // The parameter server and ByteScheduler (partition_cost_model.h).
  int ps_servers = 1;
  bool ps_split_tied = true;  // dist.ps.split_tied_gradients: WFBP-PS sends early parts early
  int64_t partition_bytes = 4 << 20;  // the PS's and ByteScheduler's largest partition
  double credit_bytes = 0.0;          // ByteScheduler's credit; 0: the fastest by the model, per N
  // DS-Sync's group averages as profile-comm --dssync-group-size timed them on measured_world
  // ranks (dist/dssync_comm_profile.h): at that N, with the same group size and racks, a
  // group average costs these curves' time instead of the network model's.
  DsSyncCommProfile dssync_measured;
};

struct ScalingRow {
  int workers = 1;
  Prediction bsp, wfbp, fusion, mgwfbp, cdsgd, dssync;
  Prediction bytescheduler_a2a, bsp_ps, wfbp_ps, bytescheduler_ps;
  double credit_a2a = 0.0, credit_ps = 0.0;  // ByteScheduler's credits (given or chosen), bytes
  bool ps_modelled = false;                  // false on two levels (the PS columns are not filled)
};

// Whether DS-Sync's measured group times apply at n workers with racks of ranks_per_rack (0:
// none): measured on n ranks, for the configured group size and the same racks.
bool dssync_measured_at(const AlgorithmSettings& settings, int n, int ranks_per_rack);

// The allreduce's cost at N: the network's line, gamma at N >= 2, and the measured curves (back
// to back and after idling) at the N they were measured on. The curves timed Gloo's ring, so a
// hierarchical allreduce across racks keeps the calibrated formula (its pieces included).
LinearCost ring_cost(const NetworkModel& network, const AlgorithmSettings& settings, int n);

// Predictions for each N (pure: no profiling, no measuring).
ScalingRow predict_row(const ModelProfile& profile, const NetworkModel& network,
                       const AlgorithmSettings& settings, int workers);

// The network the measurement implies (the rules above). `nominal` is the spec from the flags,
// the config and the defaults; `bandwidth_given`: whether its bandwidth was asked for.
struct CalibratedNetwork {
  NetworkSpec spec;
  double latency_us = 0.0;   // per hop, alpha / (2(n-1))
  double efficiency = 0.0;   // e (0 when no bandwidth was given: the measured rate is used)
  double unclamped_efficiency = 0.0;  // before the clamp to 1.5 (the output says when it applied)
};
// From profiles measured at several N (the out-of-sample mode: profile at N = 2 and 4, predict
// 8), the latency per hop, the efficiency or the link rate are the means of what each profile
// implies.
CalibratedNetwork calibrate_network(const NetworkSpec& nominal, bool bandwidth_given,
                                    const std::vector<MeasuredComm>& measured);

}  // namespace mt::dist
