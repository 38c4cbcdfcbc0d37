#include "dist/predict/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "dist/comm/hierarchical_group.h"

namespace mt::dist {

namespace {

// The curve (sizes ascending, one time each) at `bytes`: linear between neighbouring sizes, the
// smallest size's time below it, slope `beta` above the largest.
double on_curve(const std::vector<double>& sizes, const std::vector<double>& seconds, double beta, double bytes) {
  if (bytes <= sizes.front()) return seconds.front();
  if (bytes >= sizes.back()) return seconds.back() + beta * (bytes - sizes.back());
  const size_t hi = static_cast<size_t>(std::upper_bound(sizes.begin(), sizes.end(), bytes) - sizes.begin());
  const double b0 = sizes[hi - 1], b1 = sizes[hi];
  const double t0 = seconds[hi - 1], t1 = seconds[hi];
  return t0 + (t1 - t0) * (bytes - b0) / (b1 - b0);
}

}  // namespace

double LinearCost::time(double bytes) const {
  if (!measured_bytes.empty()) return on_curve(measured_bytes, measured_seconds, beta, bytes);
  if (!in_levels()) return alpha + beta * bytes;
  const double p = HierarchicalGroup::pieces_of(static_cast<int64_t>(bytes));
  const double in_rack = in_rack_beta * bytes, cross = cross_beta * bytes;
  return alpha + (in_rack + cross) / p + (p - 1) * std::max(in_rack, cross) / p;
}

double LinearCost::time(double bytes, double idle) const {
  const double back_to_back = time(bytes);
  if (idle_measured_seconds.empty() || idle <= 0) return back_to_back;
  const double rested = on_curve(measured_bytes, idle_measured_seconds, beta, bytes);
  return back_to_back + (rested - back_to_back) * std::min(idle / idle_measured, 1.0);
}

double LinearCost::time_during_compute(double bytes) const {
  if (busy_measured_seconds.empty()) return time(bytes);
  return on_curve(measured_bytes, busy_measured_seconds, beta, bytes);
}

namespace {

// A second curve's times in the order of the measured curve's sizes, which it must time exactly.
std::vector<double> aligned_to_measured(const LinearCost& cost, const std::vector<double>& bytes,
                                        const std::vector<double>& seconds, const std::string& what) {
  MT_CHECK(bytes.size() == seconds.size() && bytes.size() == cost.measured_bytes.size(), "an ", what,
           " allreduce curve needs one time for each of the measured curve's ", cost.measured_bytes.size(),
           " sizes, got ", bytes.size(), " sizes and ", seconds.size(), " times");
  std::vector<double> aligned(bytes.size(), 0.0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto at = std::find(cost.measured_bytes.begin(), cost.measured_bytes.end(), bytes[i]);
    MT_CHECK(at != cost.measured_bytes.end(), "the ", what, " allreduce curve has the size ", bytes[i],
             ", which the measured curve has not");
    MT_CHECK(seconds[i] > 0 && std::isfinite(seconds[i]), "an ", what, " allreduce curve needs times > 0, got ",
             seconds[i], " s for ", bytes[i], " bytes");
    aligned[static_cast<size_t>(at - cost.measured_bytes.begin())] = seconds[i];
  }
  return aligned;
}

}  // namespace

void set_idle_curve(LinearCost& cost, const std::vector<double>& bytes, const std::vector<double>& seconds,
                    double idle) {
  MT_CHECK(idle > 0 && std::isfinite(idle), "an after-idle allreduce curve needs an idle time > 0, got ", idle);
  cost.idle_measured_seconds = aligned_to_measured(cost, bytes, seconds, "after-idle");
  cost.idle_measured = idle;
}

void set_busy_curve(LinearCost& cost, const std::vector<double>& bytes, const std::vector<double>& seconds) {
  cost.busy_measured_seconds = aligned_to_measured(cost, bytes, seconds, "during-compute");
}

void copy_curves(const LinearCost& from, LinearCost& to) {
  to.measured_bytes = from.measured_bytes;
  to.measured_seconds = from.measured_seconds;
  to.idle_measured_seconds = from.idle_measured_seconds;
  to.idle_measured = from.idle_measured;
  to.busy_measured_seconds = from.busy_measured_seconds;
}

void set_measured_curve(LinearCost& cost, std::vector<double> bytes, std::vector<double> seconds) {
  MT_CHECK(bytes.size() == seconds.size(), "a measured allreduce curve needs one time per size: ", bytes.size(),
           " sizes, ", seconds.size(), " times");
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] < bytes[b]; });
  cost.measured_bytes.clear();
  cost.measured_seconds.clear();
  cost.idle_measured_seconds.clear();  // they belonged to the old sizes
  cost.idle_measured = 0.0;
  cost.busy_measured_seconds.clear();
  for (size_t i : order) {
    MT_CHECK(bytes[i] > 0 && seconds[i] > 0 && std::isfinite(seconds[i]),
             "a measured allreduce curve needs sizes and times > 0, got ", bytes[i], " bytes in ", seconds[i], " s");
    MT_CHECK(cost.measured_bytes.empty() || bytes[i] > cost.measured_bytes.back(),
             "a measured allreduce curve has the size ", bytes[i], " twice");
    cost.measured_bytes.push_back(bytes[i]);
    cost.measured_seconds.push_back(seconds[i]);
  }
}

LinearCost fit_linear_cost(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  return LinearCost(fit_link_cost(bytes, seconds));
}

// ---- Dag ----

int Dag::add(std::string name, double seconds, const std::vector<int>& deps) {
  const int id = static_cast<int>(tasks_.size());
  double ready = 0.0;
  int pred = -1;
  for (int d : deps) {
    if (d < 0) continue;  // none
    MT_CHECK(d < id, "Dag::add: task \"", name, "\" depends on ", d,
             ", which is not added yet (add tasks in topological order)");
    if (pred < 0 || finish_[d] > ready) {
      ready = finish_[d];
      pred = d;
    }
  }
  tasks_.push_back({std::move(name), seconds});
  finish_.push_back(ready + seconds);
  critical_pred_.push_back(pred);
  return id;
}

double Dag::critical_length() const {
  return finish_.empty() ? 0.0 : *std::max_element(finish_.begin(), finish_.end());
}

std::vector<std::string> Dag::critical_path() const {
  if (tasks_.empty()) return {};
  int last = 0;
  for (int i = 1; i < static_cast<int>(finish_.size()); ++i)
    if (finish_[i] >= finish_[last]) last = i;  // ties: the later task (the update, not a message)
  std::vector<std::string> path;
  for (int t = last; t >= 0; t = critical_pred_[t]) path.push_back(tasks_[t].name);
  std::reverse(path.begin(), path.end());
  return path;
}

// ---- Merge plans ----

// ---- Prediction ----

namespace {

// The DAG of one iteration (see predict_iteration), with `send_cpu[m]` seconds of the backward
// chain taken by message m right after the layer that completes it (while backward still runs),
// and message m `slower[m]` seconds longer than its back-to-back (or after-idle) time.
struct IterationDag {
  Dag dag;
  int first_backward = -1, backward_done = -1;
  std::vector<int> messages;
  std::vector<double> message_bytes;
};

IterationDag build_iteration_dag(const std::vector<LayerCost>& layers, const MergePlan& plan, const LinearCost& cost,
                                 double update_seconds, bool after_backward, const std::vector<double>& send_cpu,
                                 const std::vector<double>& slower) {
  const int L = static_cast<int>(layers.size());
  IterationDag it;
  Dag& dag = it.dag;
  int prev = -1;
  for (int l = 0; l < L; ++l)
    prev = dag.add("forward " + std::to_string(l), layers[l].forward, {prev});
  // Which message each layer's gradient completes (-1: none), for the send tasks.
  std::vector<int> completes(L, -1);
  for (size_t m = 0; m < plan.size(); ++m)
    if (!plan[m].empty()) completes.at(plan[m].back()) = static_cast<int>(m);
  std::vector<int> backward(L);
  for (int l = L - 1; l >= 0; --l) {
    backward[l] = dag.add("backward " + std::to_string(l), layers[l].backward, {prev});
    if (it.first_backward < 0) it.first_backward = backward[l];
    prev = backward[l];
    // A message sent while backward goes on takes some of the compute (none after layer 0:
    // backward is over by then, and BSP sends everything after backward).
    if (!after_backward && l > 0 && completes[l] >= 0 && send_cpu[static_cast<size_t>(completes[l])] > 0)
      prev = dag.add("send " + std::to_string(completes[l]) + " (CPU)", send_cpu[static_cast<size_t>(completes[l])],
                     {prev});
  }
  it.backward_done = prev;
  std::vector<int> update_deps = {it.backward_done};
  int prev_msg = -1;
  for (size_t m = 0; m < plan.size(); ++m) {
    double bytes = 0.0;
    std::vector<int> deps;
    for (int l : plan[m]) {
      bytes += layers[l].bytes;
      deps.push_back(backward[l]);
    }
    if (after_backward) deps.push_back(it.backward_done);
    if (prev_msg >= 0) deps.push_back(prev_msg);
    // How long the network idled before this message: since the previous one ended, or for the
    // first, since the last message of the previous iteration (its update, then this forward...).
    double ready = 0.0;
    for (int d : deps) ready = std::max(ready, dag.finish(d));
    const double idle = prev_msg >= 0 ? ready - dag.finish(prev_msg) : ready + update_seconds;
    prev_msg = dag.add("allreduce " + std::to_string(m), cost.time(bytes, idle) + slower[m], deps);
    it.messages.push_back(prev_msg);
    it.message_bytes.push_back(bytes);
    update_deps.push_back(prev_msg);
  }
  dag.add("update", update_seconds, update_deps);
  return it;
}

}  // namespace

Prediction predict_iteration(const std::vector<LayerCost>& layers, const MergePlan& plan,
                             const LinearCost& cost, double update_seconds, bool after_backward) {
  MT_CHECK(cost.overlap_slowdown >= 0 && cost.overlap_slowdown < 1,
           "the share of compute lost while a message is in flight must be in [0, 1), got ", cost.overlap_slowdown);
  const bool by_overlap = cost.overlap_slowdown > 0;
  std::vector<double> send_cpu(plan.size(), by_overlap ? 0.0 : cost.gamma), slower(plan.size(), 0.0);
  IterationDag it = build_iteration_dag(layers, plan, cost, update_seconds, after_backward, send_cpu, slower);
  if ((by_overlap || !cost.busy_measured_seconds.empty()) && !after_backward && it.backward_done >= 0) {
    // The share of each message that overlaps backward goes at the during-compute pace and takes
    // overlap_slowdown of that share of its back-to-back time from the compute (its own work, not
    // the waiting for cores the during-compute pace adds); both lengthen backward or the message
    // and so the overlaps. Rounds until nothing moves (a contraction where the factors are below 1;
    // the rounds are capped for the rest). How much longer each message is when all of it overlaps
    // depends on its size alone: once, before the rounds.
    std::vector<double> extra;
    for (double bytes : it.message_bytes)
      extra.push_back(std::max(0.0, cost.time_during_compute(bytes) - cost.time(bytes)));
    for (int round = 0; round < 100; ++round) {
      const double b0 = it.dag.start(it.first_backward), b1 = it.dag.finish(it.backward_done);
      double change = 0.0;
      for (size_t m = 0; m < it.messages.size(); ++m) {
        const double start = it.dag.start(it.messages[m]), finish = it.dag.finish(it.messages[m]);
        const double overlap = std::max(0.0, std::min(finish, b1) - std::max(start, b0));
        const double share = finish > start ? overlap / (finish - start) : 0.0;
        const double back_to_back = finish - start - slower[m];
        const double cpu = by_overlap ? cost.overlap_slowdown * share * back_to_back : send_cpu[m];
        const double late = extra[m] * share;
        change = std::max({change, std::abs(cpu - send_cpu[m]), std::abs(late - slower[m])});
        send_cpu[m] = cpu;
        slower[m] = late;
      }
      if (change < 1e-12) break;
      it = build_iteration_dag(layers, plan, cost, update_seconds, after_backward, send_cpu, slower);
    }
  }
  Prediction p;
  p.iteration = it.dag.critical_length();
  p.backward_end = it.backward_done >= 0 ? it.dag.finish(it.backward_done) : 0.0;
  p.comm_end = it.messages.empty() ? p.backward_end : it.dag.finish(it.messages.back());
  p.critical_path = it.dag.critical_path();
  return p;
}

MergePlan plan_for(Schedule schedule, const std::vector<LayerCost>& layers, const LinearCost& cost,
                   double cap_bytes, double first_cap_bytes) {
  const int L = static_cast<int>(layers.size());
  std::vector<double> tb, bytes;
  for (const auto& l : layers) {
    tb.push_back(l.backward);
    bytes.push_back(l.bytes);
  }
  switch (schedule) {
    case Schedule::BSP: return bsp_plan(L);
    case Schedule::WFBP: return wfbp_plan(L);
    case Schedule::FUSION: return fusion_plan(bytes, cap_bytes, first_cap_bytes);
    case Schedule::MGWFBP: return mgwfbp_best_plan(tb, bytes, cost);
  }
  return {};
}

Prediction predict_schedule(Schedule schedule, const std::vector<LayerCost>& layers,
                            const LinearCost& cost, double update_seconds, double cap_bytes,
                            double first_cap_bytes) {
  return predict_iteration(layers, plan_for(schedule, layers, cost, cap_bytes, first_cap_bytes),
                           cost, update_seconds, schedule == Schedule::BSP);
}

// ---- CD-SGD ----

namespace {

// Forward 0..L-1 then backward L-1..0 after task `after` (-1: none); returns the last backward.
int add_compute_chain(Dag& dag, const std::vector<LayerCost>& layers, int after) {
  int prev = after;
  for (size_t l = 0; l < layers.size(); ++l) prev = dag.add("forward " + std::to_string(l), layers[l].forward, {prev});
  for (size_t l = layers.size(); l-- > 0;) prev = dag.add("backward " + std::to_string(l), layers[l].backward, {prev});
  return prev;
}

}  // namespace

Prediction predict_cdsgd_period(const std::vector<LayerCost>& layers, double update_seconds,
                                const CdsgdCost& cost, bool full_precision) {
  // The training thread from handing exchange t over to handing t+1 over; the communication side
  // (encoder thread, link, decoder thread) from the same moment.
  Dag train, comm;
  const int backward_done =
      add_compute_chain(train, layers, train.add("apply exchange t-1 + local step", 2.0 * update_seconds));
  const int encoded = full_precision ? -1 : comm.add("compress t", cost.compress);
  const int exchange = comm.add(full_precision ? "exchange t (float32 allreduce)" : "exchange t (compressed)",
                                full_precision ? cost.full_exchange : cost.exchange, {encoded});
  if (!full_precision) comm.add("decode t", cost.decompress, {exchange});
  Prediction p;
  p.backward_end = train.finish(backward_done);
  p.comm_end = comm.finish(exchange);
  // The largest cycle mean: the training thread, each communication stage, the one-step delay.
  p.iteration = train.critical_length();
  p.critical_path = train.critical_path();
  for (int s = 0; s < static_cast<int>(comm.size()); ++s)
    if (comm.finish(s) - comm.start(s) > p.iteration) {
      p.iteration = comm.finish(s) - comm.start(s);
      p.critical_path = {comm.name(s)};
    }
  const double delay_cycle = (train.critical_length() + comm.critical_length()) / 2.0;
  if (delay_cycle > p.iteration) {
    p.iteration = delay_cycle;
    p.critical_path = comm.critical_path();
    for (const auto& name : train.critical_path()) p.critical_path.push_back(name);
  }
  return p;
}

Prediction predict_cdsgd(const std::vector<LayerCost>& layers, double update_seconds,
                         const CdsgdCost& cost) {
  const int k = cost.full_precision_every;
  MT_CHECK(k >= 0, "CD-SGD: full-precision period (dist.cdsgd_k) must be >= 0, got ", k);
  if (k == 1) return predict_cdsgd_period(layers, update_seconds, cost, true);
  Prediction p = predict_cdsgd_period(layers, update_seconds, cost, false);
  if (k > 1) {
    const Prediction full = predict_cdsgd_period(layers, update_seconds, cost, true);
    p.iteration = ((k - 1) * p.iteration + full.iteration) / k;
    p.comm_end = ((k - 1) * p.comm_end + full.comm_end) / k;
  }
  return p;
}

// ---- DS-Sync ----

double DssyncCost::amortized() const {
  const double group = (1.0 - cross_fraction) * in_rack + cross_fraction * cross_rack;
  if (world_every <= 0) return group;
  return ((world_every - 1) * group + world) / world_every;
}

double dssync_cross_fraction(int n, int g, int ranks_per_rack, bool rack_aware, int cross_period) {
  MT_CHECK(g >= 2, "DS-Sync group size (dist.dssync_group_size) must be >= 2, got ", g);
  MT_CHECK(cross_period >= 1, "dist.dssync_cross_period must be >= 1, got ", cross_period);
  if (ranks_per_rack <= 0 || ranks_per_rack >= n) return 0.0;
  if (rack_aware) return 1.0 / cross_period;
  int m = 0;  // phases: ceil(log_g n)
  for (int64_t span = 1; span < n; span *= g) ++m;
  int j = 0;  // phases inside a rack: floor(log_g ranks_per_rack)
  for (int64_t span = g; span <= ranks_per_rack; span *= g) ++j;
  return m == 0 ? 0.0 : std::clamp(static_cast<double>(m - j) / m, 0.0, 1.0);
}

Prediction predict_dssync(const std::vector<LayerCost>& layers, double update_seconds,
                          const DssyncCost& cost) {
  Dag dag;
  const int backward_done = add_compute_chain(dag, layers, -1);
  const int step = dag.add("local step", update_seconds, {backward_done});
  const int average = dag.add("group average (parameters + buffers)", cost.amortized(), {step});
  Prediction p;
  p.iteration = dag.finish(average);
  p.backward_end = backward_done < 0 ? 0.0 : dag.finish(backward_done);
  p.comm_end = p.iteration;
  p.critical_path = dag.critical_path();
  return p;
}

}  // namespace mt::dist
