#include "dist/predict/dssync_comm_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "dist/predict/comm_profile.h"
#include "dist/predict/profile_compute.h"
#include "dist/replicas.h"

namespace mt::dist {
namespace {

double trimmed_mean(const std::vector<double>& times) {
  std::vector<double> size_bytes, means;
  trimmed_mean_per_size(std::vector<double>(times.size(), 1.0), times, size_bytes, means);
  return means.empty() ? 0.0 : means[0];
}

// In step (see the header): per size, an untimed cycle of the schedule, then `repeats` more
// cycles, and more, as time_allreduces repeats, until they add up to seconds_per_size (a cycle
// is one iteration of each partition: the count of repeats is one per partition); each iteration
// `compute` and this rank's group average of that iteration's partition; `mine[p]` is this
// rank's group in partition p (null: alone there).
void time_in_step(ProcessGroup& world, core::Device device, const DsSyncSchedule& schedule,
                  const std::vector<std::shared_ptr<ProcessGroup>>& mine, const std::vector<int64_t>& sizes,
                  const CommProfileOptions& o, const std::function<void()>& compute, DsSyncCommProfile& profile) {
  // The compute alone, every rank at once and over several scheduler slices (5 runs, and at least
  // a quarter of a second): the part of an iteration that the model's layer profile already
  // holds (its profilers compute all at once for many iterations). A single short run after a
  // barrier mostly has a core to itself (docs/PERF.md).
  world.barrier();
  const auto start = ProfileClock::now();
  int runs = 0;
  while (runs < 5 || seconds_since(start) < 0.25) {
    compute();
    ++runs;
  }
  profile.compute_seconds = o.dssync_compute_seconds;
  profile.compute_alone_seconds =
      mean_over_ranks(world, device, {seconds_since(start) / runs}, "timing the DS-Sync profile's compute")[0];

  const std::vector<Partition>& partitions = schedule.partitions();
  const int64_t cycle = schedule.cycle();
  for (size_t s = 0; s < sizes.size(); ++s) {
    Tensor t = Tensor::ones({sizes[s]}, core::DType::Float32, device);
    // A new communicator's first operations connect it: the first size gets a few warm-ups.
    for (int w = 0; w < (s == 0 ? 4 : 1); ++w)
      for (const auto& group : mine)
        if (group) finish(group->allreduce(t), *group, "the DS-Sync profile's group average (warm-up)");
    std::vector<std::vector<double>> times(partitions.size());
    int64_t k = 0;  // the schedule's position, on from round to round
    // An untimed cycle of the schedule (it starts the ranks from the agreement before it, in step
    // as training never is), then `cycles` timed ones; returns this rank's timed seconds.
    auto run = [&](int64_t cycles) {
      const int64_t end = k + cycle * (cycles + 1), timed_from = k + cycle;
      auto last = ProfileClock::now(), first = last;
      for (; k < end; ++k) {
        compute();
        const size_t p = static_cast<size_t>(&schedule.at(k) - partitions.data());
        if (mine[p]) finish(mine[p]->allreduce(t), *mine[p], "the DS-Sync profile's group average");
        const auto now = ProfileClock::now();
        if (k == timed_from - 1) first = now;
        if (k >= timed_from) times[p].push_back(std::chrono::duration<double>(now - last).count());
        last = now;
      }
      return std::chrono::duration<double>(last - first).count();
    };
    world.barrier();
    const double spent = run(o.repeats);
    // More cycles until they add up to seconds_per_size (at most max_repeats in all): rank 0's
    // count, so every rank runs alike.
    if (o.seconds_per_size > 0 && o.max_repeats > o.repeats) {
      const double per_cycle = std::max(spent / o.repeats, 1e-6);
      const double more = std::min<double>(o.max_repeats, std::ceil(o.seconds_per_size / per_cycle)) - o.repeats;
      run(std::lround(from_rank0(world, device, std::max(0.0, more), "sharing the number of DS-Sync cycles")));
    }
    std::vector<double> means;
    for (const auto& each : times) means.push_back(trimmed_mean(each));
    means = mean_over_ranks(world, device, means, "collecting the DS-Sync group times");
    for (size_t p = 0; p < partitions.size(); ++p) {
      profile.patterns[p].size_bytes.push_back(static_cast<double>(sizes[s]) * 4.0);
      // Beyond the compute; never 0 (the model's curves take positive times): an iteration
      // cannot take less than its compute, only noise makes it look so.
      profile.patterns[p].size_seconds.push_back(std::max(means[p] - profile.compute_alone_seconds, 1e-6));
    }
  }
}

}  // namespace

DsSyncCommProfile profile_dssync_groups(ProcessGroup& world, core::Device device, int group_size,
                                        int ranks_per_rack, const CommProfileOptions& o,
                                        const std::function<void()>& compute) {
  MT_CHECK(!o.sizes_floats.empty() && o.repeats >= 1, "DS-Sync group profile: need sizes and repeats >= 1");
  MT_CHECK(ranks_per_rack >= 0, "DS-Sync group profile: ranks per rack must be >= 0 (0: one rack), got ",
           ranks_per_rack);
  DsSyncScheduleOptions so;
  so.world_size = world.size();
  so.group_size = group_size;
  so.rack_of = racks_of_consecutive(world.size(), ranks_per_rack);
  // With racks, the bottleneck-aware schedule: its in-rack partitions and its crossing ones.
  so.cross_period = ranks_per_rack > 0 ? 2 : 1;
  const DsSyncSchedule schedule(so);

  DsSyncCommProfile profile;
  profile.group_size = group_size;
  profile.ranks_per_rack = ranks_per_rack;
  std::vector<int64_t> sizes = o.sizes_floats;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int me = world.rank();
  // This rank's group in every partition, connected in the partitions' fixed order (groups of one
  // partition are disjoint, so every group's members are all creating it: nobody waits forever).
  std::vector<std::shared_ptr<ProcessGroup>> mine;
  for (const Partition& partition : schedule.partitions()) {
    GroupPatternTimes pattern;
    pattern.partition = partition;
    pattern.crosses_racks = schedule.crosses_racks(partition);
    profile.patterns.push_back(std::move(pattern));
    const RankGroup* own = nullptr;
    for (const RankGroup& g : partition)
      if (std::find(g.begin(), g.end(), me) != g.end()) own = &g;
    MT_CHECK(own != nullptr, "internal: rank ", me, " is in no group of ", partition_str(partition));
    mine.push_back(own->size() >= 2 ? world.subgroup(*own) : nullptr);
  }
  if (o.dssync_compute_seconds > 0) {
    if (compute) {
      time_in_step(world, device, schedule, mine, sizes, o, compute, profile);
    } else {
      ComputeChunk chunk = calibrated_chunk(world, device, o.dssync_compute_seconds);
      time_in_step(world, device, schedule, mine, sizes, o, [&] { chunk.run(); }, profile);
    }
    return profile;
  }
  // Every repeat starts on all groups at once. Timed back to back on their own, groups drift
  // apart: one that finishes its repeats early leaves the shared uplink to the others, and the
  // partition then measures faster than the link allows (docs/PERF.md).
  CommProfileOptions together = o;
  together.start_together = true;
  for (size_t p = 0; p < mine.size(); ++p) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      const std::vector<double> times =
          time_allreduces(mine[p].get(), world, device, sizes[s], s == 0 ? 4 : 1, together);
      const double mean = times.empty() ? 0.0 : trimmed_mean(times);
      // The maximum over ranks: every rank learns the slowest group's.
      Tensor slowest = Tensor::from_vector(std::vector<float>{static_cast<float>(mean)}, {1}).to(device);
      finish(world.allreduce(slowest, ReduceOp::Max), world, "collecting the DS-Sync group times");
      profile.patterns[p].size_bytes.push_back(static_cast<double>(sizes[s]) * 4.0);
      profile.patterns[p].size_seconds.push_back(static_cast<double>(slowest.to(core::Device::cpu()).to_vector()[0]));
    }
  }
  return profile;
}

bool dssync_pattern_curve(const DsSyncCommProfile& profile, bool crossing, std::vector<double>& bytes,
                          std::vector<double>& seconds) {
  std::map<double, std::pair<double, int>> sum;  // size -> (sum of times, partitions)
  for (const GroupPatternTimes& p : profile.patterns) {
    if (p.crosses_racks != crossing) continue;
    MT_CHECK(p.size_bytes.size() == p.size_seconds.size(), "DS-Sync group profile of ",
             partition_str(p.partition), ": ", p.size_bytes.size(), " sizes but ", p.size_seconds.size(), " times");
    for (size_t i = 0; i < p.size_bytes.size(); ++i) {
      auto& [total, count] = sum[p.size_bytes[i]];
      total += p.size_seconds[i];
      ++count;
    }
  }
  bytes.clear();
  seconds.clear();
  for (const auto& [size, entry] : sum) {
    bytes.push_back(size);
    seconds.push_back(entry.first / entry.second);
  }
  return !bytes.empty();
}

std::string dssync_comm_profile_json(const DsSyncCommProfile& p, const std::string& indent) {
  std::ostringstream os;
  os.precision(9);
  auto list = [&](const std::vector<double>& v) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  };
  os << "{\"group_size\": " << p.group_size << ", \"ranks_per_rack\": " << p.ranks_per_rack;
  if (p.compute_seconds > 0)
    os << ", \"compute_s\": " << p.compute_seconds << ", \"compute_alone_s\": " << p.compute_alone_seconds;
  os << ", \"patterns\": [";
  for (size_t k = 0; k < p.patterns.size(); ++k) {
    const GroupPatternTimes& g = p.patterns[k];
    os << (k ? "," : "") << "\n" << indent << "  {\"partition\": \"" << partition_str(g.partition)
       << "\", \"crosses_racks\": " << (g.crosses_racks ? "true" : "false") << ", \"bytes\": ";
    list(g.size_bytes);
    os << ", \"seconds\": ";
    list(g.size_seconds);
    os << "}";
  }
  os << "\n" << indent << "]}";
  return os.str();
}

}  // namespace mt::dist
