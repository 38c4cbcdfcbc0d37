// The cost model of S-SGD (docs/algorithms.md; Shi, Wang, Chu, Li 2018): an iteration is a DAG
// of tasks (forward, per-layer backward, per-message allreduce, update) and its time is the
// length of the DAG's critical path. It predicts the iteration time of each schedule for the
// plans the runtime makes (dist/merge_plan.h), and of CD-SGD and DS-Sync.
//
// Conventions: layers are numbered in forward order 0 .. L-1, so backward runs L-1 .. 0. Times
// are seconds, sizes bytes. The network is T(M) = alpha + beta * M per message (alpha: start-up
// latency, beta: seconds per byte; for a ring allreduce on n workers roughly
// 2(n-1) * latency + 2(n-1)/n * M / bandwidth).
#pragma once
#include <string>
#include <vector>

#include "dist/comm/link_cost.h"
#include "dist/ssgd/merge_plan.h"

namespace mt::dist {

// The link as the runtime plans with it (alpha, beta, gamma: dist/link_cost.h), plus what the
// cost model also measures. gamma, overlap_slowdown and the during-compute curve describe ranks
// that share CPU cores: `mintrain model` uses them in its "shared cores" mode only (off by
// default), and the runtime never.
struct LinearCost : LinkCost {
  LinearCost() = default;
  LinearCost(double alpha_s, double beta_s_per_byte, double gamma_s = 0.0) : LinkCost(alpha_s, beta_s_per_byte, gamma_s) {}
  LinearCost(const LinkCost& link) : LinkCost(link) {}

  // gamma (LinkCost): on CPU ranks that share their cores each message's protocol work is taken
  // from the training threads, so backward itself gets slower with every message sent during it.
  // Where > 0, the DAG charges the CPU that messages take from backward this way instead of gamma
  // per message: the share of the compute lost while a message is on the link during backward
  // (0 <= overlap_slowdown < 1) per second of the message's back-to-back time, each message charged
  // overlap_slowdown x the share of that time that overlaps backward. (A message that the compute
  // slows, the during-compute curve, spends the extra time waiting for cores: its own work is what
  // it takes from backward, and overlap_slowdown was measured against the back-to-back time:
  // comm_profile.h.) gamma per message only holds for the ratio of message time to compute between
  // messages it was measured at: a message that waits in the queue behind others takes nothing
  // from backward until it is sent, and a long one takes more (docs/PERF.md). gamma stays
  // MG-WFBP's rule (b) term.
  double overlap_slowdown = 0.0;
  // Optional: the mean times measured for allreduces of some sizes on the very group this cost
  // describes (ascending sizes, CommProfile's per-size means). Where present, time() follows
  // them, interpolating linearly between neighbouring sizes, holding the smallest size's time
  // below it and continuing with slope beta above the largest. Real links are not a straight
  // line in size (a token-bucket shaper lets a burst through at full speed; docs/PERF.md): at
  // the scale it was measured on, the measurement is the better model. alpha and beta stay the model for other
  // scales (NetworkModel) and for MG-WFBP's rule (b).
  std::vector<double> measured_bytes, measured_seconds;
  // Optional, with the measured curve: the same sizes' mean times when every allreduce came after
  // `idle_measured` seconds in which the network carried nothing (profile-comm --idle-ms). In
  // training the links idle while the ranks compute, and a link can be faster after idling than
  // back to back: a token-bucket link lets its bucket through at once (docs/PERF.md).
  std::vector<double> idle_measured_seconds;
  double idle_measured = 0.0;
  // Optional, with the measured curve: the same sizes' mean times while every rank also computed
  // (profile-comm times them with a second thread computing on each rank). Where ranks share
  // cores, the communication threads then get only part of a core (docs/PERF.md). The DAG
  // charges a message this time for the share of it that overlaps backward.
  std::vector<double> busy_measured_seconds;
  // Optional, the hierarchical allreduce (network_model.h): beta split by level, in_rack_beta for
  // the rack's reduce-scatter and allgather, cross_beta for the crossing (beta is their sum). A sum
  // goes in p = HierarchicalGroup::pieces_of(bytes) pieces, the in-rack levels of one piece
  // overlapping another's crossing; without a measured curve time() is then
  // alpha + (A + X) / p + (p - 1) max(A, X) / p, with A = in_rack_beta bytes and X = cross_beta
  // bytes: the first piece through every level, then the busier link's share of the rest.
  double in_rack_beta = 0.0, cross_beta = 0.0;
  bool in_levels() const { return in_rack_beta > 0 || cross_beta > 0; }
  double time(double bytes) const;
  // An allreduce that starts after the network idled `idle` seconds: the back-to-back time at
  // idle 0, the after-idle curve from idle_measured on, and linear in between (a bucket refills
  // at a steady rate). Without the after-idle curve, time(bytes).
  double time(double bytes, double idle) const;
  // An allreduce while the ranks compute (the during-compute curve; time(bytes) without it).
  double time_during_compute(double bytes) const;
};

// fit_link_cost (dist/link_cost.h), as a LinearCost without curves.
LinearCost fit_linear_cost(const std::vector<double>& bytes, const std::vector<double>& seconds);

// Attaches a measured curve to `cost` (any order of sizes; sorted here). Sizes and times must be
// > 0 and the sizes distinct.
void set_measured_curve(LinearCost& cost, std::vector<double> bytes, std::vector<double> seconds);
// Attaches the after-idle curve: times for exactly the measured curve's sizes (any order), each
// taken after `idle` seconds (> 0) of quiet network.
void set_idle_curve(LinearCost& cost, const std::vector<double>& bytes, const std::vector<double>& seconds,
                    double idle);
// Attaches the during-compute curve: times for exactly the measured curve's sizes (any order).
void set_busy_curve(LinearCost& cost, const std::vector<double>& bytes, const std::vector<double>& seconds);
// Puts `from`'s measured curves (back to back, after idling, during compute; checked when they
// were set) on `to`, whose alpha, beta, gamma and overlap_slowdown stay.
void copy_curves(const LinearCost& from, LinearCost& to);

// A DAG of timed tasks. Tasks are added in a topological order (every dependency already
// added), so the longest path is one pass over them.
class Dag {
 public:
  int add(std::string name, double seconds, const std::vector<int>& deps = {});  // a dependency -1: none
  size_t size() const { return tasks_.size(); }
  double finish(int task) const { return finish_[task]; }  // earliest finish time
  double start(int task) const { return finish_[task] - tasks_[task].seconds; }
  const std::string& name(int task) const { return tasks_[task].name; }
  double critical_length() const;                    // the latest finish over all tasks
  std::vector<std::string> critical_path() const;    // task names along it, first to last

 private:
  struct Task {
    std::string name;
    double seconds;
  };
  std::vector<Task> tasks_;
  std::vector<double> finish_;
  std::vector<int> critical_pred_;  // the dependency that finishes last (-1: none)
};

struct LayerCost {
  double forward = 0.0;   // seconds
  double backward = 0.0;  // seconds
  double bytes = 0.0;     // gradient size
};

struct Prediction {
  double iteration = 0.0;     // critical-path length, seconds
  double backward_end = 0.0;  // forward + backward, no communication
  double comm_end = 0.0;      // when the last message finishes
  std::vector<std::string> critical_path;
};

// The DAG of one iteration under `plan`: forward 0..L-1, backward L-1..0, message m after its last
// gradient and after message m-1 (one link, FIFO), update after every message and after backward.
// after_backward = true makes the first message wait for all of backward (BSP). A message launched
// while backward still runs puts a task of cost.gamma ("send m (CPU)") into the backward chain
// right after the layer that completed it; with cost.overlap_slowdown > 0 the task lasts
// overlap_slowdown x the share of message m's back-to-back time that overlaps backward (found by
// iterating the DAG to its fixed point: the stolen time lengthens backward, which lengthens the
// overlap). With a during-compute curve, the share of a message's time that overlaps backward runs
// at that curve's pace instead of the back-to-back one (same fixed point).
Prediction predict_iteration(const std::vector<LayerCost>& layers, const MergePlan& plan,
                             const LinearCost& cost, double update_seconds, bool after_backward);
// The plan a schedule uses for these layers (FUSION caps in bytes).
MergePlan plan_for(Schedule schedule, const std::vector<LayerCost>& layers, const LinearCost& cost,
                   double cap_bytes, double first_cap_bytes);
Prediction predict_schedule(Schedule schedule, const std::vector<LayerCost>& layers,
                            const LinearCost& cost, double update_seconds, double cap_bytes,
                            double first_cap_bytes);

// ---- CD-SGD and DS-Sync (docs/algorithms.md sections 2 and 3) ----
//
// CD-SGD, steady state (after the warm-up iterations, which are S-SGD BSP). Iteration t hands its
// gradients to the communication side and then, before its local step, waits for exchange t-1, so
// exchange t runs while iteration t+1 computes. Three threads and the link, each in FIFO order:
//   training thread: apply t-1 (global optimizer step) and local step -> forward -> backward
//   encoder thread: compress t (error feedback included); link: exchange t; decoder thread: decode t
// The period is the largest cycle mean of that pipeline: compute = 2 x update + forward + backward
// (the local step is costed as a second optimizer step: it reads weights and gradient and writes
// weights like one; the two weight copies are folded into it), each communication stage alone, and
// (compute + compress + exchange + decode) / 2: exchange t must be decoded before the end of
// iteration t+1 applies it, a cycle over two iterations. Every k-th iteration (cdsgd_k) is full
// precision: no compress/decode, a float32 allreduce instead; the prediction is the mean
// ((k-1) compressed + 1 full) / k.
struct CdsgdCost {
  double compress = 0.0;       // seconds: error feedback + compress the whole flat gradient
  double decompress = 0.0;     // seconds: decode every payload of one exchange and sum them
  double exchange = 0.0;       // seconds: one compressed exchange (allreduce or allgather)
  double full_exchange = 0.0;  // seconds: one full-precision exchange (float32 allreduce)
  int full_precision_every = 0;  // dist.cdsgd_k: every k-th iteration full precision; 0 = never
};
// One period (full_precision: the float32 iteration). critical_path names the bottleneck's tasks.
Prediction predict_cdsgd_period(const std::vector<LayerCost>& layers, double update_seconds,
                                const CdsgdCost& cost, bool full_precision);
// The mean period over the k-step cycle; critical_path is the compressed period's (the full one's
// when k = 1).
Prediction predict_cdsgd(const std::vector<LayerCost>& layers, double update_seconds,
                         const CdsgdCost& cost);

// DS-Sync: forward, backward, a purely local optimizer step, then the group's allreduce of the
// parameters and float32 buffers; nothing overlaps (the average needs the stepped weights, and
// the next forward needs the average). The iterations differ only in which groups average:
struct DssyncCost {
  double in_rack = 0.0;         // seconds: one group average whose groups stay inside racks
  double cross_rack = 0.0;      // seconds: one whose groups cross racks (all at once)
  double world = 0.0;           // seconds: a world average (dssync_global_average_every)
  double cross_fraction = 0.0;  // share of the group iterations that cross racks
  int world_every = 0;          // every K-th iteration is a world average; 0 = never
  // The mean communication seconds per iteration over those kinds.
  double amortized() const;
};
// Share of iterations whose groups cross racks, for n ranks in racks of ranks_per_rack (0 or
// >= n: one rack, nothing crosses) with groups of g. Rack-aware (the config gives the racks):
// 1 / cross_period. Otherwise the butterfly's phases run in turn and those above the rack's
// digits cross: (m - j) / m with m = ceil(log_g n) phases and j = floor(log_g ranks_per_rack)
// of them inside a rack (exact for n and ranks_per_rack powers of g).
double dssync_cross_fraction(int n, int g, int ranks_per_rack, bool rack_aware, int cross_period);
Prediction predict_dssync(const std::vector<LayerCost>& layers, double update_seconds,
                          const DssyncCost& cost);

}  // namespace mt::dist
