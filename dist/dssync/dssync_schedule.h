// DS-Sync's schedules (README.md's table; docs/algorithms.md section 3): for every iteration t a
// partition of the N ranks into groups of at most g, a pure function of t and a shared seed, so
// every rank computes the same partition without talking and a resume continues from t alone.
// butterfly: phase t mod m groups the ranks whose base-g digits differ in digit p only; for
// other N the extra ranks fold onto the first ones in a phase of their own. random: a pool of
// partitions drawn from the seed. With racks and cross_period > 1, the phases that cross racks
// come every cross_period iterations (at most cross_ranks_per_rack ranks of a rack crossing);
// the other iterations average inside each rack.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm/topology.h"

namespace mt::dist {

using RankGroup = std::vector<int>;          // sorted ranks
using Partition = std::vector<RankGroup>;    // disjoint groups covering 0..N-1 (singletons included)

struct DsSyncScheduleOptions {
  int world_size = 1;
  int group_size = 2;
  std::string type = "butterfly";  // "butterfly" (folded for N != g^m) or "random"
  uint64_t seed = 0;               // random: the shared seed
  int pool_size = 16;              // random: partitions prepared at start
  std::vector<int> rack_of;        // rack id of every rank; empty = one rack
  int cross_period = 1;            // with several racks: cross-rack groups every that many iterations;
                                   // 1 (every iteration) only with cross_ranks_per_rack 0
  int cross_ranks_per_rack = 1;    // ranks of a rack crossing per crossing iteration; 0 = no limit
};

std::vector<std::string> dssync_schedule_types();  // "butterfly", "random"


// The pure butterfly; n must be a power of g (Error otherwise). n = 1: no phase.
std::vector<Partition> butterfly_phases(int n, int g);
// The folded butterfly for any n >= 1 (the pure butterfly when n is a power of g).
std::vector<Partition> folded_butterfly_phases(int n, int g);

// Checks that groups are disjoint, sorted and cover 0..n-1; Error naming the problem otherwise.
void check_partition(const Partition& partition, int n);
std::string partition_str(const Partition& partition);  // "{0,1}{2,3}"

class DsSyncSchedule {
 public:
  explicit DsSyncSchedule(DsSyncScheduleOptions options);

  const Partition& at(int64_t iteration) const;
  // The group of `rank` at `iteration`.
  const RankGroup& group_of(int64_t iteration, int rank) const;
  // Every partition the schedule can return, in a fixed order (the same on every rank).
  const std::vector<Partition>& partitions() const { return pool_; }
  // Every distinct group of >= 2 ranks, sorted: the global order in which communicators are made.
  std::vector<RankGroup> distinct_groups() const;
  // at(t) == at(t + cycle()) for butterfly schedules; for random, pool_size (not a true cycle).
  int64_t cycle() const { return cycle_; }
  bool crosses_racks(const Partition& partition) const;
  bool spans_racks(const RankGroup& group) const;  // members in two racks or more
  int world_size() const { return options_.world_size; }
  const DsSyncScheduleOptions& options() const { return options_; }
  std::string describe() const;  // multi-line, for the start-up log

 private:
  size_t index_at(int64_t iteration) const;

  DsSyncScheduleOptions options_;
  std::vector<Partition> pool_;   // distinct partitions
  std::vector<size_t> sequence_;  // butterfly/bottleneck: pool index per t mod cycle
  int64_t cycle_ = 1;
  std::vector<std::vector<int>> position_;  // [pool index][rank] -> group index in that partition
};

}  // namespace mt::dist
