// The sender's rate control: a window of packets in flight, grown and shrunk as TCP Reno does
// (AIMD), so a DLCP flow takes about the share a TCP flow would on the same bottleneck instead
// of flooding it. Slow start doubles the window every round trip until the first loss; after it,
// +1 packet per window of acknowledged packets, and a loss halves the window, at most once per
// round trip (only a packet sent after the last decrease can cause another). Round-trip times
// and the retransmission timeout are per path (path_health.h).
#pragma once
#include <chrono>
#include <cstdint>

namespace mt::dist::dlcp {

class CongestionWindow {
 public:
  using Clock = std::chrono::steady_clock;
  CongestionWindow(double initial = 16, double max = 4096);

  double window() const { return window_; }
  void on_acked(uint32_t packets);
  // A packet sent at `sent_at` was lost.
  void on_loss(Clock::time_point sent_at, Clock::time_point now);
  uint64_t decreases() const { return decreases_; }

 private:
  double window_, max_, threshold_;
  Clock::time_point last_decrease_{};
  uint64_t decreases_ = 0;
};

}  // namespace mt::dist::dlcp
