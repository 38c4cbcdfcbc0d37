#include "dist/dlcp/exchange_record.h"

#include "core/strings.h"

namespace mt::dist::dlcp {

void ExchangeRecord::add(const ExchangeStats& iteration) {
  total_.add(iteration);
  since_epoch_.add(iteration);
  since_record_.add(iteration);
  ++steps_since_epoch_, ++steps_since_record_;
}

std::string ExchangeRecord::epoch_summary() {
  if (steps_since_epoch_ == 0) return "";
  const double it = double(steps_since_epoch_);
  const std::string line = core::formatted(
      "dlcp: %.2f%% of gradient contributions lost (bound %.2f%%), %.1f retransmissions, %.1f deadline endings and "
      "%.1f ms %s per iteration; %llu packets refused",
      100 * since_epoch_.loss(), 100 * loss_bound_, since_epoch_.retransmissions / it,
      since_epoch_.deadline_endings / it, 1000 * since_epoch_.seconds / it, where_.c_str(),
      static_cast<unsigned long long>(since_epoch_.rejected.rejected()));
  since_epoch_ = {};
  steps_since_epoch_ = 0;
  return line;
}

std::string ExchangeRecord::metrics_fields() {
  if (steps_since_record_ == 0) return "";
  const double it = double(steps_since_record_);
  const std::string fields = core::formatted(
      "\"dlcp_loss\":%.6g,\"dlcp_retransmissions\":%.6g,\"dlcp_deadline_endings\":%.6g,\"dlcp_ms\":%.6g",
      since_record_.loss(), since_record_.retransmissions / it, since_record_.deadline_endings / it,
      1000 * since_record_.seconds / it);
  since_record_ = {};
  steps_since_record_ = 0;
  return fields;
}

}  // namespace mt::dist::dlcp
