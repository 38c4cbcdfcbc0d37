#include "support/fault_injector.h"

namespace mt::dist::dlcp {

FaultAction FaultInjector::decide(const PacketHeader& h, int path) {
  if (plan_.drop_on_path_if && plan_.drop_on_path_if(h, path)) {
    ++dropped_;
    return FaultAction::Drop;
  }
  if (h.kind == PacketKind::Ack && !plan_.acks_too) return FaultAction::Deliver;
  if (plan_.drop_if && plan_.drop_if(h)) {
    ++dropped_;
    return FaultAction::Drop;
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double r = u(random_);
  if (r < plan_.drop_fraction) {
    ++dropped_;
    return FaultAction::Drop;
  }
  if (r < plan_.drop_fraction + plan_.duplicate_fraction) {
    ++duplicated_;
    return FaultAction::Duplicate;
  }
  if (r < plan_.drop_fraction + plan_.duplicate_fraction + plan_.reorder_fraction) {
    ++held_back_;
    return FaultAction::HoldBack;
  }
  return FaultAction::Deliver;
}

}  // namespace mt::dist::dlcp
