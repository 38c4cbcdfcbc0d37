// The sender's view of each path to one peer, across exchanges: round-trip time, recent losses,
// and avoidance of a path that lost half its recent packets or stayed silent while another
// answered (kBaseAvoid, doubling while it stays bad, at most kMaxAvoid).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace mt::dist::dlcp {

class PathHealth {
 public:
  using Clock = std::chrono::steady_clock;

  // A packet sent on this path was acknowledged; `rtt` is a round-trip sample (Karn: first
  // transmissions only), or zero when the packet gives none.
  void on_delivered(Clock::duration rtt);
  // A packet sent on it at `sent_at` reached the peer (acknowledged, late or not).
  void on_reached(Clock::time_point sent_at) { newest_reached_ = std::max(newest_reached_, sent_at); }
  // Whether a packet sent after `t` has reached the peer on this path: then the path works, and a
  // packet of it lost before is one unlucky drop, not a silent path.
  bool reached_after(Clock::time_point t) const { return newest_reached_ > t; }
  // A packet sent on it was lost. `silent`: the peer answered on another path meanwhile and this
  // path delivered nothing sent after the packet.
  void on_lost(bool silent, Clock::time_point now);

  bool avoided(Clock::time_point now) const { return now < avoid_until_; }
  Clock::time_point avoided_until() const { return avoid_until_; }
  bool has_rtt() const { return have_rtt_; }
  // RFC 6298: srtt + 4 rttvar, clamped to [5 ms, 1 s]; 20 ms before the first sample.
  Clock::duration retransmit_timeout() const;
  uint64_t times_avoided() const { return times_avoided_; }

 private:
  void avoid(Clock::time_point now);

  double srtt_s_ = 0, rttvar_s_ = 0;
  bool have_rtt_ = false;
  uint16_t outcomes_ = 0;  // the last packets' fates, newest in bit 0 (1 = lost)
  int known_ = 0;          // how many of those bits are real (up to 16)
  Clock::time_point avoid_until_{};
  Clock::time_point newest_reached_{};
  Clock::duration avoid_for_{};
  uint64_t times_avoided_ = 0;
};

// The paths to one peer, as spraying and resending use them.
class PathSet {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PathSet(int paths = 1) : paths_(static_cast<size_t>(paths)) {}
  int size() const { return static_cast<int>(paths_.size()); }
  PathHealth& operator[](int path) { return paths_[static_cast<size_t>(path)]; }
  const PathHealth& operator[](int path) const { return paths_[static_cast<size_t>(path)]; }

  // Whether `path` may take packets now: not avoided, or every path is (then the one whose
  // avoidance ends first stands in for all, so that something is always sent).
  bool usable(int path, Clock::time_point now) const;
  // The first usable path from `from` on, in turn (round-robin spraying).
  int next_usable(int from, Clock::time_point now) const;
  // Where to resend a packet lost on `lost_on`: the next usable path after it, so that a
  // packet lost on a congested path does not wait behind the same hotspot again.
  int for_resend(int lost_on, Clock::time_point now) const { return next_usable((lost_on + 1) % size(), now); }
  // How long a packet may wait for its acknowledgement before the sender probes: the smallest
  // timeout of the usable paths (a slow path's timeout would let its lost packets wait for it).
  Clock::duration retransmit_timeout(Clock::time_point now) const;

 private:
  std::vector<PathHealth> paths_;
};

}  // namespace mt::dist::dlcp
