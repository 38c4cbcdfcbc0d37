#include "dist/predict/comm_profile.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/json_escape.h"
#include "dist/predict/profile_compute.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

// How many timed allreduces of one size fill options.seconds_per_size (at least
// options.repeats, at most options.max_repeats), from rank 0's typical (median) time in
// `times_so_far`: one stall among the first few must not cut the count. Every rank of `agree`
// gets rank 0's count, so all run alike.
int repeats_to_fill(ProcessGroup& agree, core::Device device, const std::vector<double>& times_so_far,
                    const CommProfileOptions& o) {
  const double per_op = std::max(median(times_so_far), 1e-6);
  const double wanted = std::min<double>(o.max_repeats, std::ceil(o.seconds_per_size / per_op));
  return static_cast<int>(
      std::lround(from_rank0(agree, device, std::max<double>(o.repeats, wanted), "sharing the number of repeats")));
}

}  // namespace

std::vector<double> time_allreduces(ProcessGroup* timed, ProcessGroup& agree, core::Device device, int64_t floats,
                                    int warmups, const CommProfileOptions& o) {
  MT_CHECK(floats >= 1, "profile_communication: message sizes must be >= 1 float, got ", floats);
  std::vector<double> mine;
  Tensor t;
  if (timed) {
    t = Tensor::ones({floats}, core::DType::Float32, device);
    for (int w = 0; w < warmups; ++w) finish(timed->allreduce(t), *timed, "the communication profile's allreduce (warm-up)");
  }
  auto run = [&](int count) {
    for (int r = 0; r < count; ++r) {
      if (o.idle_before_seconds > 0) compute_for(o.idle_before_seconds);
      if (o.start_together) agree.barrier();
      if (!timed) continue;
      const auto start = ProfileClock::now();
      finish(timed->allreduce(t), *timed, "the communication profile's timed allreduce");
      mine.push_back(seconds_since(start));
    }
  };
  run(o.repeats);
  if (o.seconds_per_size > 0 && o.max_repeats > o.repeats) run(repeats_to_fill(agree, device, mine, o) - o.repeats);
  return mine;
}

namespace {

// Every size timed in turn, one allreduce of each per cycle (after `warmups` untimed cycles),
// until each has its count (repeats_to_fill): why in turn, comm_profile.h. Appends (bytes,
// seconds) of every timed allreduce in the order they ran.
void time_sizes_in_turn(ProcessGroup& group, core::Device device, const CommProfileOptions& o, int warmups,
                        std::vector<double>& bytes, std::vector<double>& seconds) {
  const size_t S = o.sizes_floats.size();
  std::vector<Tensor> messages;
  for (int64_t floats : o.sizes_floats) {
    MT_CHECK(floats >= 1, "profile_communication: message sizes must be >= 1 float, got ", floats);
    messages.push_back(Tensor::ones({floats}, core::DType::Float32, device));
  }
  std::vector<size_t> order(S);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return o.sizes_floats[a] < o.sizes_floats[b]; });
  for (int w = 0; w < warmups; ++w)
    for (size_t s : order) finish(group.allreduce(messages[s]), group, "the communication profile's allreduce (warm-up)");
  std::vector<std::vector<double>> mine(S);
  auto cycle = [&](const std::vector<int>& wanted) {
    // Every cycle starts together: a rank leaves an allreduce as soon as its own result is in,
    // and after the largest size the others can still be receiving for a while, which the next
    // cycle's small first message would wait out (docs/PERF.md). Inside a cycle each size follows the next smaller one, as merged messages follow
    // merged ones in training and small ones small ones.
    group.barrier();
    for (size_t s : order) {
      if (static_cast<int>(mine[s].size()) >= wanted[s]) continue;
      if (o.idle_before_seconds > 0) compute_for(o.idle_before_seconds);
      const auto start = ProfileClock::now();
      finish(group.allreduce(messages[s]), group, "the communication profile's timed allreduce");
      mine[s].push_back(seconds_since(start));
      bytes.push_back(static_cast<double>(o.sizes_floats[s]) * 4.0);
      seconds.push_back(mine[s].back());
    }
  };
  std::vector<int> wanted(S, o.repeats);
  for (int r = 0; r < o.repeats; ++r) cycle(wanted);
  if (o.seconds_per_size > 0 && o.max_repeats > o.repeats) {
    for (size_t s = 0; s < S; ++s) wanted[s] = repeats_to_fill(group, device, mine[s], o);
    const int most = *std::max_element(wanted.begin(), wanted.end());
    for (int r = o.repeats; r < most; ++r) cycle(wanted);
  }
}

}  // namespace

CommProfile profile_communication(ProcessGroup& group, core::Device device, const CommProfileOptions& o) {
  MT_CHECK(!o.sizes_floats.empty() && o.repeats >= 1 && o.seconds_per_size >= 0,
           "profile_communication: need sizes, repeats >= 1 and seconds_per_size >= 0");
  CommProfile p;
  p.world = group.size();
  p.group = group.describe();
  CommProfileOptions back_to_back = o;
  back_to_back.idle_before_seconds = 0.0;
  // The first operations after connecting are slow (ranks still arriving, buffers being
  // registered): a few untimed cycles first.
  time_sizes_in_turn(group, device, back_to_back, 2, p.bytes, p.seconds);
  std::vector<double> idle_size_bytes, idle_means;
  if (o.idle_before_seconds > 0) {
    p.idle_before_seconds = o.idle_before_seconds;
    time_sizes_in_turn(group, device, o, 0, p.idle_bytes, p.idle_seconds);
    trimmed_mean_per_size(p.idle_bytes, p.idle_seconds, idle_size_bytes, idle_means);
  }
  // While the ranks compute (training's backward beside its messages), where compute and
  // communication share the CPU: the same condition as gamma's.
  const bool shares_cpu = o.measure_gamma && !device.is_cuda() && group.size() > 1;
  std::vector<double> busy_size_bytes, busy_means;
  if (shares_cpu) {
    {
      const ComputeInBackground computing;
      time_sizes_in_turn(group, device, back_to_back, 0, p.busy_bytes, p.busy_seconds);
    }
    trimmed_mean_per_size(p.busy_bytes, p.busy_seconds, busy_size_bytes, busy_means);
  }
  // Rank 0's means are everybody's: broadcast once, they are the cost's measured curves
  // (cost_model.h) and every rank fits the same line through them, so all plan alike.
  trimmed_mean_per_size(p.bytes, p.seconds, p.size_bytes, p.size_mean_seconds);
  {
    std::vector<float> means(p.size_mean_seconds.begin(), p.size_mean_seconds.end());
    means.insert(means.end(), idle_means.begin(), idle_means.end());
    means.insert(means.end(), busy_means.begin(), busy_means.end());
    Tensor t = Tensor::from_vector(means, {static_cast<int64_t>(means.size())}).to(device);
    finish(group.broadcast(t, 0), group, "sharing the measured allreduce times");
    const std::vector<float> shared = t.to(core::Device::cpu()).to_vector();
    const auto mid = shared.begin() + static_cast<std::ptrdiff_t>(p.size_mean_seconds.size());
    const auto busy = mid + static_cast<std::ptrdiff_t>(idle_means.size());
    set_measured_curve(p.cost, p.size_bytes, std::vector<double>(shared.begin(), mid));
    if (!idle_means.empty())
      set_idle_curve(p.cost, idle_size_bytes, std::vector<double>(mid, busy), o.idle_before_seconds);
    if (!busy_means.empty()) set_busy_curve(p.cost, busy_size_bytes, std::vector<double>(busy, shared.end()));
  }
  const LinearCost line = fit_linear_cost(p.cost.measured_bytes, p.cost.measured_seconds);
  p.cost.alpha = line.alpha;
  p.cost.beta = line.beta;
  // A GPU computes on its own while the host talks to the network: no compute is lost there.
  if (!o.measure_gamma || device.is_cuda() || group.size() == 1) return p;

  MT_CHECK(o.gamma_messages >= 1 && o.gamma_rounds >= 1 && o.gamma_chunk_seconds > 0,
           "profile_communication: gamma needs messages, rounds and a chunk length > 0");
  // One chunk calibrated on every rank at once (the contention of training).
  ComputeChunk chunk = calibrated_chunk(group, device, o.gamma_chunk_seconds);
  Tensor message = Tensor::ones({o.gamma_message_floats}, core::DType::Float32, device);
  // The messages' own time on the link, back to back (the measured curve): how long the network
  // is busy during the compute at most, from the first chunk's end.
  const double messages_seconds = o.gamma_messages * p.cost.time(static_cast<double>(o.gamma_message_floats) * 4.0);
  std::vector<double> alone_chunks, with_chunks, slowdowns;
  for (int round = 0; round < o.gamma_rounds; ++round) {
    group.barrier();
    auto start = ProfileClock::now();
    for (int k = 0; k < o.gamma_messages; ++k) chunk.run();
    const double alone = seconds_since(start);

    group.barrier();
    std::vector<std::shared_ptr<Work>> works;
    start = ProfileClock::now();
    for (int k = 0; k < o.gamma_messages; ++k) {
      chunk.run();
      works.push_back(group.allreduce(message));  // in place on one buffer: the sum is not used
    }
    const double with = seconds_since(start);
    for (auto& w : works) finish(w, group, "the communication profile's message during compute");

    const auto means = mean_over_ranks(group, device, {alone, with}, "averaging the compute timings");
    alone_chunks.push_back(means[0] / o.gamma_messages);
    with_chunks.push_back(means[1] / o.gamma_messages);
    // The share of the compute lost while the network was busy: the messages queue behind each
    // other when they are longer than the chunks, and then the network is busy for all of the compute after the first chunk.
    const double busy = std::min(means[1] * (1.0 - 1.0 / o.gamma_messages), messages_seconds);
    slowdowns.push_back(busy > 0 ? (means[1] - means[0]) / busy : 0.0);
  }
  // Medians of each kind over the rounds (a round disturbed by something else on the machine
  // drops out of both), and gamma from those same two numbers, so the report explains itself.
  p.chunk_alone_seconds = median(alone_chunks);
  p.chunk_with_message_seconds = median(with_chunks);
  p.cost.gamma = std::max(0.0, p.chunk_with_message_seconds - p.chunk_alone_seconds);
  // Below 0 is noise; near 1 the compute would stop whenever a message is in flight, which the
  // DAG's fixed point cannot take (and no measurement here came near).
  p.cost.overlap_slowdown = std::clamp(median(slowdowns), 0.0, 0.9);
  return p;
}

void trimmed_mean_per_size(const std::vector<double>& bytes, const std::vector<double>& seconds,
                           std::vector<double>& size_bytes, std::vector<double>& size_mean_seconds) {
  MT_CHECK(bytes.size() == seconds.size(), "trimmed_mean_per_size: ", bytes.size(), " sizes but ", seconds.size(),
           " times");
  size_bytes.clear();
  size_mean_seconds.clear();
  std::vector<std::vector<double>> times;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const size_t k = static_cast<size_t>(std::find(size_bytes.begin(), size_bytes.end(), bytes[i]) - size_bytes.begin());
    if (k == size_bytes.size()) {
      size_bytes.push_back(bytes[i]);
      times.emplace_back();
    }
    times[k].push_back(seconds[i]);
  }
  for (std::vector<double>& t : times) {
    std::sort(t.begin(), t.end());
    const size_t cut = t.size() / 10;  // 10% off each end
    double sum = 0;
    for (size_t i = cut; i < t.size() - cut; ++i) sum += t[i];
    size_mean_seconds.push_back(sum / static_cast<double>(t.size() - 2 * cut));
  }
}

std::string comm_profile_json(const CommProfile& p) {
  std::ostringstream os;
  os.precision(9);
  os << "{\n  \"world\": " << p.world << ",\n  \"group\": \"" << core::json_escape(p.group)
     << "\",\n  \"alpha_s\": " << p.cost.alpha
     << ",\n  \"beta_s_per_byte\": " << p.cost.beta << ",\n  \"gamma_s\": " << p.cost.gamma
     << ",\n  \"chunk_alone_s\": " << p.chunk_alone_seconds
     << ",\n  \"chunk_with_message_s\": " << p.chunk_with_message_seconds
     << ",\n  \"overlap_slowdown\": " << p.cost.overlap_slowdown
     << ",\n  \"idle_before_s\": " << p.idle_before_seconds;
  auto list = [&](const char* key, const std::vector<double>& v) {
    os << ",\n  \"" << key << "\": [";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  };
  list("bytes", p.bytes);
  list("seconds", p.seconds);
  if (p.idle_before_seconds > 0) {
    list("idle_bytes", p.idle_bytes);
    list("idle_seconds", p.idle_seconds);
  }
  if (!p.busy_bytes.empty()) {
    list("busy_bytes", p.busy_bytes);
    list("busy_seconds", p.busy_seconds);
  }
  if (p.dssync.group_size > 0) os << ",\n  \"dssync\": " << dssync_comm_profile_json(p.dssync, "  ");
  os << "\n}\n";
  return os.str();
}

}  // namespace mt::dist
