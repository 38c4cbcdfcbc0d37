// DS-Sync's communication measured the way it runs (docs/algorithms.md sections 3 and 5): all groups
// of one partition average at the same time, so what an iteration pays is the slowest of
// several concurrent allreduces that may share links, not one ring's time.
//
// Why not derive it from the world ring's profile: where groups share a slow link (two racks),
// their TCP flows overflow its queue, and retransmission timeouts, not the fair share of the
// rate, set the time; the ring's rate shared among the groups predicted DS-Sync far too fast
// (docs/PERF.md). A ring of all ranks, one flow per direction on
// that link, never shows it. Likewise, at 8 ranks on 2 cores the start-up time of a pair's
// allreduce is set by the scheduler, not by the ring's 14 steps scaled down to 2.
//
// So every partition of the DS-Sync schedule (dssync_schedule.h: groups of `group_size`, racks
// of `ranks_per_rack` with their crossing phases) is timed as training runs it: each rank
// allreduces within its group of that partition, all groups at once (every repeat starts after a
// barrier of the world, so the groups contend in each one as in training; the idle time of the
// options comes before it), at each size; a partition's time per size is the slowest group's
// 10%-trimmed mean (the next partition's groups mix ranks of
// all of them, so the slowest one holds everyone back). `mintrain model` averages the partitions
// that stay inside racks and those that cross, as the schedule uses them in turn.
//
// In step (options.dssync_compute_seconds > 0): the synthetic iteration itself. Every rank
// computes a fixed amount of work (calibrated to that many seconds while all ranks compute), then
// averages in its group of the schedule's next partition, iteration after iteration, in the
// schedule's order and with no barrier, as DS-Sync trains. A partition's time per size is the
// mean over ranks of its iterations' trimmed mean, less the compute timed alone: what an
// iteration pays beyond its compute. Why: on ranks that share cores, partners fall out of step
// (the later one's compute was descheduled longer) and one group averages while the others still
// compute. Timed together after a barrier, the group average missed that wait (docs/PERF.md).
//
// Collective: every rank of `world` calls it with the same arguments.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "dist/dssync/dssync_schedule.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

struct CommProfileOptions;  // comm_profile.h, which holds a DsSyncCommProfile

struct GroupPatternTimes {
  Partition partition;
  bool crosses_racks = false;
  std::vector<double> size_bytes;    // ascending
  std::vector<double> size_seconds;  // the slowest group's trimmed mean at each size
};

struct DsSyncCommProfile {
  int group_size = 0;      // 0: not measured
  int ranks_per_rack = 0;  // 0: one rack
  // In step: the compute asked for per iteration, and the calibrated work's mean time with every
  // rank computing at once (what was subtracted). Both 0: timed with all groups starting together.
  double compute_seconds = 0.0;
  double compute_alone_seconds = 0.0;
  std::vector<GroupPatternTimes> patterns;  // every distinct partition of the schedule
};

// Times every partition of the butterfly DS-Sync schedule for `group_size` and the racks (with
// racks, the in-rack partitions and the crossing ones) at options.sizes_floats, with the repeat
// rules of CommProfileOptions; in step when options.dssync_compute_seconds > 0, each iteration's
// compute then `compute` where given (tests: ranks that compute for different times), else
// that many seconds of calibrated work.
DsSyncCommProfile profile_dssync_groups(ProcessGroup& world, core::Device device, int group_size,
                                        int ranks_per_rack, const CommProfileOptions& options,
                                        const std::function<void()>& compute = {});

// The mean over the partitions that cross racks (crossing = true) or stay inside (false) of
// their times per size, as a measured curve (sizes ascending). False when there is none of that
// kind.
bool dssync_pattern_curve(const DsSyncCommProfile& profile, bool crossing, std::vector<double>& bytes,
                          std::vector<double>& seconds);

// The JSON value written under "dssync" in comm_profile_json:
// {"group_size": g, "ranks_per_rack": r, ["compute_s": c, "compute_alone_s": a,] "patterns":
// [{"partition": "{0,1}{2,3}", "crosses_racks": false, "bytes": [...], "seconds": [...]}, ...]}
// (compute_s and compute_alone_s only when timed in step).
std::string dssync_comm_profile_json(const DsSyncCommProfile& profile, const std::string& indent);

}  // namespace mt::dist
