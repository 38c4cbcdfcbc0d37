#include "dist/dlcp/path_health.h"

#include <algorithm>
#include <bit>

namespace mt::dist::dlcp {
namespace {

// Long enough to move the next round trips' packets elsewhere, short enough that a path wrongly
// taken for bad (one unlucky burst) is back soon.
constexpr auto kBaseAvoid = std::chrono::milliseconds(20);
// The bound on the backoff: a hotspot that ends gives its path back within this.
constexpr auto kMaxAvoid = std::chrono::milliseconds(320);
// Judged by loss only once this many outcomes are known since the last avoidance: a single
// drop on a path that carried two packets says nothing about the path.
constexpr int kOutcomesToJudge = 8;
constexpr int kOutcomesKept = 16;

}  // namespace

void PathHealth::on_delivered(Clock::duration rtt) {
  if (rtt > Clock::duration::zero()) {
    const double r = std::chrono::duration<double>(rtt).count();
    if (!have_rtt_) {
      srtt_s_ = r, rttvar_s_ = r / 2, have_rtt_ = true;
    } else {
      rttvar_s_ = 0.75 * rttvar_s_ + 0.25 * std::abs(srtt_s_ - r);
      srtt_s_ = 0.875 * srtt_s_ + 0.125 * r;
    }
  }
  outcomes_ = static_cast<uint16_t>(outcomes_ << 1);
  known_ = std::min(known_ + 1, kOutcomesKept);
}

void PathHealth::on_lost(bool silent, Clock::time_point now) {
  // Packets sent before the path was avoided keep being found lost while it is: that is the
  // same bad spell, not new evidence.
  if (avoided(now)) return;
  outcomes_ = static_cast<uint16_t>((outcomes_ << 1) | 1u);
  known_ = std::min(known_ + 1, kOutcomesKept);
  const int lost = std::popcount(static_cast<unsigned>(outcomes_ & ((1u << known_) - 1)));
  if (silent || (known_ >= kOutcomesToJudge && 2 * lost >= known_)) avoid(now);
}

void PathHealth::avoid(Clock::time_point now) {
  // Bad again within one avoidance period of the last one ending: it still is, back off more.
  const bool again = times_avoided_ > 0 && now - avoid_until_ < avoid_for_;
  avoid_for_ = again ? std::min<Clock::duration>(2 * avoid_for_, kMaxAvoid) : Clock::duration(kBaseAvoid);
  avoid_until_ = now + avoid_for_;
  outcomes_ = 0, known_ = 0;  // after the avoidance the path is judged afresh
  ++times_avoided_;
}

PathHealth::Clock::duration PathHealth::retransmit_timeout() const {
  // Bounded below so a busy receiver (shared cores, a training step) is not taken for loss.
  const double rto = have_rtt_ ? srtt_s_ + 4 * rttvar_s_ : 0.02;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::clamp(rto, 0.005, 1.0)));
}

bool PathSet::usable(int path, Clock::time_point now) const {
  if (!(*this)[path].avoided(now)) return true;
  for (const PathHealth& p : paths_)
    if (!p.avoided(now) || p.avoided_until() < (*this)[path].avoided_until()) return false;
  return true;  // every path is avoided and this one's avoidance ends first
}

int PathSet::next_usable(int from, Clock::time_point now) const {
  for (int k = 0; k < size(); ++k) {
    const int path = (from + k) % size();
    if (usable(path, now)) return path;
  }
  return from;  // not reached: some path is always usable
}

PathSet::Clock::duration PathSet::retransmit_timeout(Clock::time_point now) const {
  Clock::duration best = Clock::duration::max();
  for (int path = 0; path < size(); ++path)
    if (usable(path, now)) best = std::min(best, (*this)[path].retransmit_timeout());
  return best;
}

}  // namespace mt::dist::dlcp
