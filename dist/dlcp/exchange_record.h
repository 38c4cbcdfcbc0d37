// DLCP's statistics as a synchronizer reports them: each iteration's ExchangeStats added up
// since the last epoch line (rank 0's log) and since the last metrics record (dlcp_loss,
// dlcp_retransmissions, dlcp_deadline_endings and dlcp_ms per iteration, averaged over the
// record's window). Shared by the ring and the parameter-server form.
#pragma once
#include <cstdint>
#include <string>

#include "dist/dlcp/transport.h"

namespace mt::dist::dlcp {

class ExchangeRecord {
 public:
  // `where` ends the epoch line's time ("in the ring", "in push and pull").
  ExchangeRecord(double loss_bound, std::string where) : loss_bound_(loss_bound), where_(std::move(where)) {}

  void add(const ExchangeStats& iteration);
  const ExchangeStats& total() const { return total_; }
  // "" when no iteration ran since the last call; both restart their window.
  std::string epoch_summary();
  std::string metrics_fields();

 private:
  double loss_bound_;
  std::string where_;
  ExchangeStats total_, since_epoch_, since_record_;
  int64_t steps_since_epoch_ = 0, steps_since_record_ = 0;
};

}  // namespace mt::dist::dlcp
