#include "dist/dssync_comm_profile.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "core/error.h"
#include "dist/comm_profile.h"
#include "dist/replicas.h"

namespace mt::dist {

DsSyncCommProfile profile_dssync_groups(ProcessGroup& world, core::Device device, int group_size,
                                        int ranks_per_rack, const CommProfileOptions& o) {
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
  const int me = world.rank(), n = world.size();
  // Every repeat starts on all groups at once. Timed back to back on their own, groups drift
  // apart: one that finishes its repeats early leaves the shared uplink to the others, and the
  // crossing partition of LeNet on two racks measured 263 ms where four pairs' 0.99 MB through
  // the 25 Mbit/s link need at least 315 (training paid about 390).
  CommProfileOptions together = o;
  together.start_together = true;
  for (const Partition& partition : schedule.partitions()) {
    GroupPatternTimes pattern;
    pattern.partition = partition;
    pattern.crosses_racks = schedule.crosses_racks(partition);
    const RankGroup* mine = nullptr;
    for (const RankGroup& g : partition)
      if (std::find(g.begin(), g.end(), me) != g.end()) mine = &g;
    MT_CHECK(mine != nullptr, "internal: rank ", me, " is in no group of ", partition_str(partition));
    std::shared_ptr<ProcessGroup> group = mine->size() >= 2 ? world.subgroup(*mine) : nullptr;
    for (size_t s = 0; s < sizes.size(); ++s) {
      // A new communicator's first operations connect it: the first size gets a few warm-ups.
      const std::vector<double> times = time_allreduces(group.get(), world, device, sizes[s], s == 0 ? 4 : 1, together);
      double mean = 0.0;
      if (!times.empty()) {
        std::vector<double> size_bytes, means;
        trimmed_mean_per_size(std::vector<double>(times.size(), 1.0), times, size_bytes, means);
        mean = means[0];
      }
      // Every rank's mean in its own slot, summed: every rank learns the slowest group's.
      std::vector<float> slots(static_cast<size_t>(n), 0.0f);
      slots[static_cast<size_t>(me)] = static_cast<float>(mean);
      Tensor t = Tensor::from_vector(slots, {static_cast<int64_t>(n)}).to(device);
      finish(world.allreduce(t), world, "collecting the DS-Sync group times");
      const std::vector<float> all = t.to(core::Device::cpu()).to_vector();
      pattern.size_bytes.push_back(static_cast<double>(sizes[s]) * 4.0);
      pattern.size_seconds.push_back(static_cast<double>(*std::max_element(all.begin(), all.end())));
    }
    profile.patterns.push_back(std::move(pattern));
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
  os << "{\"group_size\": " << p.group_size << ", \"ranks_per_rack\": " << p.ranks_per_rack
     << ", \"patterns\": [";
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
