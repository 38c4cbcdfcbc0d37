#include "dist/dlcp/congestion_window.h"

#include <algorithm>

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

}  // namespace mt::dist::dlcp
