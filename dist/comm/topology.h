// Which ranks share a rack (or host): as the config gives them, or measured at start-up. Pairs
// of ranks time allreduces on their own communicators in round-robin rounds (the same on every
// rank, so nothing deadlocks), the times are allgathered, and every rank clusters the same
// matrix: pairs faster than sqrt(fastest x slowest) share a rack, a spread under 4x is one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

struct TopologyProbe {
  int64_t message_floats = 64 * 1024;  // 256 KiB per allreduce
  int repetitions = 5;                 // the fastest is kept (after one warm-up)
};

// seconds[i][j] (symmetric, diagonal ignored) -> rack id per rank, numbered by first rank.
std::vector<int> racks_from_times(const std::vector<std::vector<double>>& seconds);

// Collective over `world`: every rank must call it. Returns the rack id of every rank.
std::vector<int> measure_racks(ProcessGroup& world, const TopologyProbe& probe = {});

// The rack of each of `world` ranks for racks of `ranks_per_rack` consecutive ranks (0: one rack,
// empty), as dist.dssync.ranks_per_rack and dist.ssgd.ranks_per_rack assign them.
std::vector<int> racks_of_consecutive(int world, int ranks_per_rack);
// Racks from a config: `rack` (one id per rank) when given, else `ranks_per_rack` consecutive
// ranks per rack; `field` names the config message in errors ("dist.ssgd").
std::vector<int> racks_from_config(const std::vector<int>& rack, int ranks_per_rack, int world_size,
                                   const std::string& field);

}  // namespace mt::dist
