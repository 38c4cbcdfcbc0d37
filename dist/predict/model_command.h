// `mintrain model`: what data-parallel training of a config's model would cost on N workers.
// It profiles the model on this machine (one process, a few iterations), then feeds the per-layer
// times into the cost model (dist/cost_model.h) on a network the user describes
// (dist/network_model.h) and prints, for each N, the predicted seconds per iteration and the
// scaling efficiency of the S-SGD schedules, CD-SGD and DS-Sync, and for one N the critical path
// of each schedule's DAG: the chain of tasks that sets the iteration time, i.e. the bottleneck.
//
//   mintrain model CONFIG [--set k=v ...] [--workers 1,2,4,...] [--at N]
//                  [--bandwidth-gbps X] [--latency-us Y]
//                  [--ranks-per-rack R --inter-bandwidth-gbps X --inter-latency-us Y]
//                  [--allreduce ring|hierarchical] [--profile-iters K] [--warmup-iters W]
//                  [--layer-times FILE.json] [--save-profile FILE.json] [--comm-profile FILE.json]
//
// Profiling. Layers are the model's parameter groups (the parameters of one module, e.g.
// "conv1.weight" and "conv1.bias"), in forward order (the reverse of the order in which their
// gradients complete). Backward time of a parameter is the time since the previous grad-ready
// hook (the first: since backward started), the way MG-WFBP profiles; a layer's is the sum over
// its parameters. Per-layer forward times cannot be observed without forward hooks, so the
// measured forward time (including the loss) is split across layers in proportion to their
// backward time (evenly if backward time is zero). The update time is the optimizer step plus
// zero_grad plus whatever backward does after the last gradient is final. Data loading is not
// timed (the loader prefetches). On a GPU every hook waits for the gradient (one-value copy to
// the host), so times are completion times, slightly inflated.
//
// The profile file (--save-profile writes it, --layer-times reads it; every time in seconds):
//   {"model": "lenet5", "device": "cpu", "batch_size": 64, "iterations": 10,
//    "update_seconds": 0.0004, "buffer_bytes": 0,
//    "layers": [{"name": "conv1", "forward": 1e-4, "backward": 2e-4, "bytes": 624}, ...]}
// plus, optionally, "compress_seconds" and "decode_seconds" (CD-SGD's compressor on the whole
// gradient; measured on this machine when absent).
//
// The communication profile (--comm-profile; `mintrain profile-comm` writes it, see
// apps/profile_comm_command.h) calibrates the network with what was measured on n = "world" ranks
// with Gloo's ring allreduce, T(M) = alpha + beta * M, and gamma:
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
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "dist/predict/comm_profile_file.h"
#include "apps/config.h"
#include "dist/predict/cost_model.h"
#include "dist/predict/dssync_comm_profile.h"
#include "dist/predict/network_model.h"

namespace mt::apps {

struct LayerProfile {
  std::string name;
  double forward = 0.0;   // seconds
  double backward = 0.0;  // seconds
  double bytes = 0.0;     // gradient bytes
};

// A tied parameter's earlier uses (docs/algorithms.md section 6, "Tied parameters in two
// parts"): `bytes` of layer `from`'s gradient are final when layer `layer`'s backward ends (BERT's
// word embedding: its decoder part, with the MLM head, long before the lookup's).
struct EarlyPart {
  size_t layer = 0;
  size_t from = 0;
  double bytes = 0.0;
};

struct ModelProfile {
  std::string model;
  std::string device = "cpu";
  int64_t batch_size = 0;  // per worker
  int iterations = 0;      // profiled (0: read from a file written by hand)
  std::vector<LayerProfile> layers;  // forward order
  double update_seconds = 0.0;
  double buffer_bytes = 0.0;         // float32 buffers (DS-Sync averages them too)
  double compress_seconds = -1.0;    // < 0: unknown (measured when needed)
  double decode_seconds = -1.0;      // one payload
  std::vector<EarlyPart> early_parts;  // tied parameters' earlier uses, where the profile saw them
  double forward_total() const;
  double backward_total() const;
  double gradient_bytes() const;
  std::vector<dist::LayerCost> layer_costs() const;
  // The same with every early part's bytes moved to the layer they become final with: what the
  // parameter server's split exchanges (its lookup rows, riding with partitions not pushed yet,
  // are not priced).
  std::vector<dist::LayerCost> layer_costs_split() const;
};

// Builds a one-process Trainer from the config and times `iterations` iterations after `warmup`.
ModelProfile profile_model(const RunConfig& config, int warmup, int iterations);
ModelProfile read_profile(const std::string& path);
void write_profile(const ModelProfile& profile, const std::string& path);

// The algorithms' settings the prediction uses, from config.dist.
struct AlgorithmSettings {
  double bucket_cap_mb = 25.0, first_bucket_cap_mb = 1.0;        // FUSION
  dist::CdsgdCost cdsgd_per_exchange;  // compress/decode seconds and cdsgd_k (network parts unset)
  double cdsgd_payload_bytes = 0.0;    // one rank's compressed payload
  bool cdsgd_summable = true;          // allreduce (true) or allgather
  std::string compression = "none";
  int dssync_group_size = 2, dssync_cross_period = 1, dssync_global_average_every = 0;
  bool dssync_rack_aware = false;      // the config names the racks
  // The network as profile-comm measured it on `measured_world` ranks (0: no profile): its gamma
  // and overlap_slowdown enter every S-SGD prediction at N >= 2, and at N = measured_world the
  // ring's cost follows its measured curves (back to back, after idling, during compute) instead
  // of the line (dist::LinearCost). Its own alpha and beta are not used here: the network model
  // was calibrated from them.
  int measured_world = 0;
  dist::LinearCost measured;
  // Every profile's measured curves by the N it was measured on (several with --comm-profile
  // A,B: profiles at other N calibrate the network, and each one's curves apply at its own N).
  std::map<int, dist::LinearCost> curves_at;
  // The parameter server and ByteScheduler (partition_cost_model.h).
  int ps_servers = 1;
  bool ps_split_tied = true;  // dist.ps.split_tied_gradients: WFBP-PS sends early parts early
  int64_t partition_bytes = 4 << 20;  // the PS's and ByteScheduler's largest partition
  double credit_bytes = 0.0;          // ByteScheduler's credit; 0: the fastest by the model, per N
  // DS-Sync's group averages as profile-comm --dssync-group-size timed them on measured_world
  // ranks (dist/dssync_comm_profile.h): at that N, with the same group size and racks, a
  // group average costs these curves' time instead of the network model's.
  dist::DsSyncCommProfile dssync_measured;
};

struct ScalingRow {
  int workers = 1;
  dist::Prediction bsp, wfbp, fusion, mgwfbp, cdsgd, dssync;
  dist::Prediction bytescheduler_a2a, bsp_ps, wfbp_ps, bytescheduler_ps;
  double credit_a2a = 0.0, credit_ps = 0.0;  // ByteScheduler's credits (given or chosen), bytes
  bool ps_modelled = false;                  // false on two levels (the PS columns are not filled)
};

// Whether DS-Sync's measured group times apply at n workers with racks of ranks_per_rack (0:
// none): measured on n ranks, for the configured group size and the same racks.
bool dssync_measured_at(const AlgorithmSettings& settings, int n, int ranks_per_rack);

// Predictions for each N (pure: no profiling, no measuring).
ScalingRow predict_row(const ModelProfile& profile, const dist::NetworkModel& network,
                       const AlgorithmSettings& settings, int workers);

// The network the measurement implies (the rules above). `nominal` is the spec from the flags,
// the config and the defaults; `bandwidth_given`: whether its bandwidth was asked for.
struct CalibratedNetwork {
  dist::NetworkSpec spec;
  double latency_us = 0.0;   // per hop, alpha / (2(n-1))
  double efficiency = 0.0;   // e (0 when no bandwidth was given: the measured rate is used)
  double unclamped_efficiency = 0.0;  // before the clamp to 1.5 (the output says when it applied)
};
CalibratedNetwork calibrate_network(const dist::NetworkSpec& nominal, bool bandwidth_given,
                                    const MeasuredComm& measured);
// From profiles measured at several N (the out-of-sample mode: profile at N = 2 and 4, predict
// 8): the latency per hop, the efficiency or the link rate are the means of what each profile
// implies by the rules above (one profile: calibrate_network's numbers).
CalibratedNetwork calibrate_network(const dist::NetworkSpec& nominal, bool bandwidth_given,
                                    const std::vector<MeasuredComm>& measured);

// The subcommand; args exclude "model". Returns the exit status (errors throw core::Error).
int run_model_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace mt::apps
