#include "dist/dlcp/congestion_window.h"

#include <algorithm>
#include <cmath>

namespace mt::dist::dlcp {

CongestionWindow::CongestionWindow(double initial, double max) : window_(initial), max_(max), threshold_(max) {}

void CongestionWindow::on_acked(uint32_t packets) {
  for (uint32_t i = 0; i < packets; ++i) window_ += window_ < threshold_ ? 1.0 : 1.0 / window_;
  window_ = std::min(window_, max_);
}

void CongestionWindow::on_loss(Clock::time_point sent_at, Clock::time_point now) {
  if (sent_at < last_decrease_) return;  // the same loss event as the last decrease
  threshold_ = std::max(2.0, window_ / 2);
  window_ = threshold_;
  last_decrease_ = now;
  ++decreases_;
}

void CongestionWindow::on_rtt_sample(Clock::duration rtt) {
  const double r = std::chrono::duration<double>(rtt).count();
  if (!have_rtt_) {
    srtt_s_ = r, rttvar_s_ = r / 2, have_rtt_ = true;
    return;
  }
  rttvar_s_ = 0.75 * rttvar_s_ + 0.25 * std::abs(srtt_s_ - r);
  srtt_s_ = 0.875 * srtt_s_ + 0.125 * r;
}

CongestionWindow::Clock::duration CongestionWindow::retransmit_timeout() const {
  // Bounded below so a busy receiver (shared cores, a training step) is not taken for loss.
  const double rto = have_rtt_ ? srtt_s_ + 4 * rttvar_s_ : 0.02;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::clamp(rto, 0.005, 1.0)));
}

}  // namespace mt::dist::dlcp
