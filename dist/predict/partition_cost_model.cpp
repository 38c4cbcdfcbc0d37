#include "dist/predict/partition_cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"

namespace mt::dist {

PartitionSchedule bsp_ps(int64_t partition_bytes) {
  PartitionSchedule s;
  s.partition_bytes = partition_bytes;
  s.after_backward = true;
  return s;
}

PartitionSchedule wfbp_ps(int64_t partition_bytes) {
  PartitionSchedule s;
  s.partition_bytes = partition_bytes;
  return s;
}

PartitionSchedule bytescheduler(Architecture architecture, int64_t partition_bytes, double credit_bytes) {
  PartitionSchedule s;
  s.architecture = architecture;
  s.partition_bytes = partition_bytes;
  s.input_first = true;
  s.credit_bytes = credit_bytes;
  s.gated_forward = true;
  return s;
}

namespace {

std::vector<int> plus(std::vector<int> deps, int task) {
  if (task >= 0) deps.push_back(task);
  return deps;
}

// The resources a partition uses, each the last task on its FIFO chain (-1: none yet).
struct Resources {
  int ring = -1;                     // allreduce: the ring's transfers
  int worker_up = -1, worker_down = -1;
  std::vector<int> server_in, server_out;
};

// The tasks a partition adds: when every worker holds its sum, and when its bytes return to
// ByteScheduler's credit (allreduce: the same; parameter server: the server's receipt of the push).
struct PartitionTasks {
  int done = -1;
  int credit_back = -1;
};

// Adds partition k's tasks after `launch`.
PartitionTasks add_allreduce(Dag& dag, Resources& r, const LinearCost& ring, size_t k, double bytes,
                  const std::vector<int>& launch) {
  const std::string name = std::to_string(k);
  const double total = ring.time(bytes);
  const double startup = std::clamp(ring.alpha, 0.0, total);
  const int s = dag.add("start-up " + name, startup, launch);
  r.ring = dag.add("allreduce " + name, total - startup, plus({s}, r.ring));
  return {r.ring, r.ring};
}

PartitionTasks add_push_pull(Dag& dag, Resources& r, const PsLinks& links, size_t k, const PsPartition& part,
                  const std::vector<int>& launch) {
  const std::string name = std::to_string(k), server = "server " + std::to_string(part.server);
  const double b = static_cast<double>(part.bytes()), n = links.workers;
  const double worker_time = links.latency + b * links.worker_seconds_per_byte;
  const double server_time = links.latency + n * b * links.server_seconds_per_byte;
  int& in = r.server_in.at(static_cast<size_t>(part.server));
  int& out = r.server_out.at(static_cast<size_t>(part.server));
  // Named resource first, so that a run of partitions on one link reads "server 0 link: push 0..5".
  r.worker_up = dag.add("worker link: push " + name, worker_time, plus(launch, r.worker_up));
  in = dag.add(server + " link: push " + name, server_time, plus(launch, in));
  const int summed = dag.add("summed " + name, 0.0, {r.worker_up, in});
  // The workers are alike, so their copies share the server's link and are all taken when it
  // finishes: the receipt leaves then and takes one latency back (the runtime's credit).
  const int receipt = dag.add("receipt " + name, links.latency, {summed});
  out = dag.add(server + " link: pull " + name, server_time, plus({summed}, out));
  r.worker_down = dag.add("worker link: pull " + name, worker_time, plus({summed}, r.worker_down));
  return {dag.add("pulled " + name, 0.0, {out, r.worker_down}), receipt};
}

}  // namespace

Prediction predict_partitioned(const std::vector<LayerCost>& layers, double update_seconds,
                               const PartitionSchedule& schedule, const LinearCost& ring, const PsLinks& links) {
  MT_CHECK(!layers.empty(), "the partitioned cost model needs at least one layer");
  MT_CHECK(update_seconds >= 0, "the update time must be >= 0 s, got ", update_seconds);
  const bool ps = schedule.architecture == Architecture::ParameterServer;
  if (ps) {
    MT_CHECK(links.workers >= 1 && links.servers >= 1, "a parameter server needs >= 1 worker and >= 1 server, got ",
             links.workers, " workers and ", links.servers, " servers");
    MT_CHECK(links.latency >= 0 && links.worker_seconds_per_byte >= 0 && links.server_seconds_per_byte >= 0,
             "the parameter server's links need latency and seconds per byte >= 0, got ", links.latency, " s, ",
             links.worker_seconds_per_byte, " and ", links.server_seconds_per_byte, " s/B");
  }
  const int L = static_cast<int>(layers.size());
  std::vector<int64_t> numel;
  double total_bytes = 0.0;
  for (const auto& l : layers) {
    MT_CHECK(l.bytes >= 0 && l.forward >= 0 && l.backward >= 0, "a layer needs bytes and times >= 0, got ", l.bytes,
             " bytes, forward ", l.forward, " s, backward ", l.backward, " s");
    numel.push_back(std::llround(l.bytes / 4.0));
    total_bytes += static_cast<double>(numel.back()) * 4.0;
  }
  std::vector<size_t> push_order;  // backward order: the order the gradients become ready
  for (int l = L - 1; l >= 0; --l) push_order.push_back(static_cast<size_t>(l));
  const std::vector<PsPartition> plan =
      plan_partitions(numel, push_order, schedule.partition_bytes, ps ? links.servers : 1);

  Dag dag;
  std::vector<int> backward(static_cast<size_t>(L));
  int prev = -1;
  for (int l = L - 1; l >= 0; --l) {
    backward[static_cast<size_t>(l)] =
        dag.add("backward " + std::to_string(l), layers[static_cast<size_t>(l)].backward, plus({}, prev));
    prev = backward[static_cast<size_t>(l)];
  }
  const int backward_done = prev;
  auto ready_task = [&](size_t k) { return schedule.after_backward ? backward_done : backward[plan[k].param]; };

  // The scheduler, event by event: partitions become ready in push order (the plan's order);
  // at every event the ready ones leave by priority while the credit allows (strictly: a
  // partition that does not fit holds back those behind it). Each launch depends on its
  // gradient and on the event that let it go, so the DAG's times are the simulation's.
  Resources res;
  res.server_in.assign(ps ? static_cast<size_t>(links.servers) : 0, -1);
  res.server_out = res.server_in;
  const double credit = schedule.credit_bytes > 0 ? schedule.credit_bytes : std::numeric_limits<double>::infinity();
  std::vector<int> done(plan.size(), -1);
  std::set<std::pair<size_t, size_t>> queue;  // (priority, partition)
  struct Flight {
    int task;
    double bytes;
  };
  std::vector<Flight> flying;
  double in_flight = 0.0, now = 0.0;
  int now_task = -1;
  size_t released = 0;
  const double eps = 1e-15;
  while (true) {
    while (released < plan.size() && dag.finish(ready_task(released)) <= now + eps) {
      queue.insert({schedule.input_first ? plan[released].param : 0, released});
      ++released;
    }
    for (size_t i = flying.size(); i-- > 0;) {
      if (dag.finish(flying[i].task) <= now + eps) {
        in_flight -= flying[i].bytes;
        flying.erase(flying.begin() + static_cast<long>(i));
      }
    }
    while (!queue.empty()) {
      const size_t k = queue.begin()->second;
      const double bytes = static_cast<double>(plan[k].bytes());
      if (!flying.empty() && in_flight + bytes > credit) break;
      const std::vector<int> launch = plus({ready_task(k)}, now_task);
      const PartitionTasks t =
          ps ? add_push_pull(dag, res, links, k, plan[k], launch) : add_allreduce(dag, res, ring, k, bytes, launch);
      done[k] = t.done;
      flying.push_back({t.credit_back, bytes});
      in_flight += bytes;
      queue.erase(queue.begin());
    }
    double next = std::numeric_limits<double>::infinity();
    int next_task = -1;
    if (released < plan.size()) {
      next_task = ready_task(released);
      next = dag.finish(next_task);
    }
    for (const Flight& f : flying) {
      if (dag.finish(f.task) < next) {
        next = dag.finish(f.task);
        next_task = f.task;
      }
    }
    if (next_task < 0) break;
    now = next;
    now_task = next_task;
  }

  // The update and the next iteration's forward, on the training thread after backward.
  Prediction p;
  p.backward_end = dag.finish(backward_done);
  p.comm_end = p.backward_end;
  for (int d : done) p.comm_end = std::max(p.comm_end, dag.finish(d));
  prev = backward_done;
  if (schedule.gated_forward) {
    // Layer l's share of the update (by its bytes) once its partitions are in, then its forward.
    for (int l = 0; l < L; ++l) {
      std::vector<int> deps = {prev};
      for (size_t k = 0; k < plan.size(); ++k)
        if (plan[k].param == static_cast<size_t>(l)) deps.push_back(done[k]);
      const double share = total_bytes > 0 ? static_cast<double>(numel[static_cast<size_t>(l)]) * 4.0 / total_bytes
                                           : 1.0 / L;
      prev = dag.add("update " + std::to_string(l), update_seconds * share, deps);
      prev = dag.add("next forward " + std::to_string(l), layers[static_cast<size_t>(l)].forward, {prev});
    }
  } else {
    std::vector<int> deps = {prev};
    deps.insert(deps.end(), done.begin(), done.end());
    prev = dag.add("update", update_seconds, deps);
    for (int l = 0; l < L; ++l)
      prev = dag.add("next forward " + std::to_string(l), layers[static_cast<size_t>(l)].forward, {prev});
  }
  p.iteration = dag.finish(prev);
  p.critical_path = dag.critical_path();
  return p;
}

CreditChoice best_credit(const std::vector<LayerCost>& layers, double update_seconds, Architecture architecture,
                         int64_t partition_bytes, const LinearCost& ring, const PsLinks& links) {
  MT_CHECK(partition_bytes >= 4, "ByteScheduler's partition must be >= 4 bytes (one float32), got ", partition_bytes);
  double total = 0.0;
  for (const auto& l : layers) total += l.bytes;
  CreditChoice best;
  for (double credit = static_cast<double>(partition_bytes);; credit *= 2) {
    const Prediction p =
        predict_partitioned(layers, update_seconds, bytescheduler(architecture, partition_bytes, credit), ring, links);
    best.tried.emplace_back(credit, p.iteration);
    if (best.tried.size() == 1 || p.iteration < best.prediction.iteration * (1 - 1e-12)) {
      best.credit_bytes = credit;
      best.prediction = p;
    }
    if (credit >= total) break;  // this one already lets every partition fly at once
  }
  return best;
}

}  // namespace mt::dist
