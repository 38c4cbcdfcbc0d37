// Measuring the communication side of the cost model on the machine and network at hand
// (docs/algorithms.md section 5): the (trimmed) mean time of allreduces of several sizes, kept as the
// cost's measured curve and fitted by T(M) = alpha + beta * M, and gamma, the compute a message
// takes from the training thread when it is sent while computation goes on (cost_model.h
// explains why that matters for ranks that share cores).
//
// gamma is measured the way training meets it: every rank computes the same fixed work (a chain
// of matrix products, cut into `gamma_messages` chunks) twice, once alone and once sending one
// small allreduce after each chunk, as backward hooks do. Per round each rank's two times are
// averaged over the ranks; gamma = median chunk time with a message - median chunk time alone
// over `gamma_rounds` rounds, never negative (noise can make the difference so). All ranks run
// it at once, so ranks that share cores see the same contention as in training. The same rounds
// give the cost's overlap_slowdown (cost_model.h): the compute lost divided by the time the
// network was busy meanwhile, min(the compute after the first chunk, the messages' back-to-back
// time on the measured curve), the median over the rounds. The other side of the same sharing,
// the messages slowed by the compute, is the during-compute curve: every size timed once more
// while a second thread on every rank computes (measured with gamma, skipped with it).
//
// Why a mean and many repeats: an iteration sends many messages, so what it costs is the sum of
// their times, whose expectation is the sum of the means; where ranks share cores small
// operations have a heavy tail, so every size is repeated until its timed operations add up to
// `seconds_per_size` (between `repeats` and `max_repeats` times; rank 0 decides the count from
// its first times, so all ranks agree). The sizes take turns, one allreduce of each per cycle,
// so that every size meets the machine's drift in speed alike. Trimmed (the top and bottom 10%
// dropped) because on shaped links a few operations in fifty stall for a TCP retransmission
// timeout. The measurements behind each choice: docs/PERF.md, "Why the cost model measures as
// it does".
//
// Collective: every rank of the group calls profile_communication with the same options.
#pragma once
#include <string>
#include <vector>

#include "core/device.h"
#include "dist/predict/cost_model.h"
#include "dist/predict/dssync_comm_profile.h"
#include "dist/comm/process_group.h"

namespace mt::dist {

struct CommProfileOptions {
  std::vector<int64_t> sizes_floats = {256, 2048, 16384, 131072, 524288, 1048576};
  int repeats = 4;                // at least this many timed allreduces per size (after a warm-up) ...
  double seconds_per_size = 0.3;  // ... and more, until they add up to about this long ...
  int max_repeats = 64;           // ... but not more than this (0 seconds: exactly `repeats`)
  // > 0: every size is timed a second time, each allreduce after every rank computed this long
  // (not counted in its time) while the network idled, as in training between its messages; a
  // link can be faster after idling than back to back (a token bucket refills). The model
  // takes both curves (LinearCost::time(bytes, idle)). DS-Sync's groups, whose average always
  // follows the compute, are timed only this way.
  double idle_before_seconds = 0.0;
  // Every timed allreduce starts after a barrier of the `agree` group of time_allreduces: groups
  // that time their own allreduces side by side (DS-Sync's) then contend in every repeat, as in
  // training, instead of drifting apart and sharing a link less than training does.
  bool start_together = false;
  // > 0: DS-Sync's groups (dssync_comm_profile.h) are timed in step with this much compute per
  // iteration instead of with all groups starting together: what an iteration pays beyond its
  // compute, partners that fall out of step on shared cores included.
  double dssync_compute_seconds = 0.0;
  bool measure_gamma = true;
  int gamma_messages = 24;             // chunks of compute, one message after each
  double gamma_chunk_seconds = 0.004;  // target length of one chunk, computing alone
  int gamma_rounds = 5;
  int64_t gamma_message_floats = 4096;  // 16 KB, a typical layer's gradient: the per-message part
};

struct CommProfile {
  int world = 1;
  std::string group;               // the group's description ("gloo/tcp world of 4")
  std::vector<double> bytes;       // every timed allreduce: its size ...
  std::vector<double> seconds;     // ... and rank 0's time for it
  std::vector<double> size_bytes;         // each size once ...
  std::vector<double> size_mean_seconds;  // ... and the 10% trimmed mean of this rank's times
  LinearCost cost;  // rank 0's means as its measured curve (and after-idle curve), alpha and beta
                    // fitted on the back-to-back means; gamma
  double chunk_alone_seconds = 0;  // one compute chunk, alone (mean over ranks)
  double chunk_with_message_seconds = 0;  // one chunk followed by a message send
  double idle_before_seconds = 0;  // > 0: the sizes were timed again after this long idle ...
  std::vector<double> idle_bytes, idle_seconds;  // ... every one of those allreduces, as above
  std::vector<double> busy_bytes, busy_seconds;  // and again while every rank computed (with gamma)
  DsSyncCommProfile dssync;  // DS-Sync's group patterns, when measured (group_size > 0)
};

CommProfile profile_communication(ProcessGroup& group, core::Device device,
                                  const CommProfileOptions& options = {});

// The timed part of one size: `floats`-value allreduces on `timed` (after `warmups` untimed
// ones), at least options.repeats and more until they add up to options.seconds_per_size (at
// most options.max_repeats); the count beyond options.repeats is rank 0 of `agree`'s, so every
// rank of `agree` (which holds `timed`) runs alike. This rank's times, in order. timed = null: a
// rank with nothing to time this round, which still takes part in agreeing and in the barriers
// of options.start_together (DS-Sync's patterns, where a rank may sit alone).
std::vector<double> time_allreduces(ProcessGroup* timed, ProcessGroup& agree, core::Device device, int64_t floats,
                                    int warmups, const CommProfileOptions& options);

// The mean time of each distinct size in (bytes, seconds), after dropping its fastest and
// slowest 10% (none below 10 times), sizes in order of first appearance: what the fit of alpha
// and beta goes through.
void trimmed_mean_per_size(const std::vector<double>& bytes, const std::vector<double>& seconds,
                           std::vector<double>& size_bytes, std::vector<double>& size_mean_seconds);

// A small JSON document: {"world": 4, "group": "...", "alpha_s": ..., "beta_s_per_byte": ...,
// "gamma_s": ..., "chunk_alone_s": ..., "chunk_with_message_s": ..., "overlap_slowdown": ..., "bytes": [...], "seconds": [...]},
// and "dssync": {...} (dssync_comm_profile_json) when the group patterns were measured.
// (`mintrain model --comm-profile` reads it back: comm_profile_file.h.)
std::string comm_profile_json(const CommProfile& profile);

}  // namespace mt::dist
