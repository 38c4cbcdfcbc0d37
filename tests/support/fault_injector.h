// Faults on purpose, for the DLCP tests: the sending endpoint asks the injector about each packet
// before it goes out (PacketFaults, dist/dlcp/datagram_endpoint.h). A known set (a predicate on the header: which transfer, which packet) or a
// seeded random fraction is dropped, duplicated, or held back and sent after the next packet
// (reordered). Acks are left alone unless `acks_too`.
#pragma once
#include <cstdint>
#include <functional>
#include <random>

#include "dist/dlcp/datagram_endpoint.h"

namespace mt::dist::dlcp {

struct FaultPlan {
  std::function<bool(const PacketHeader&)> drop_if;  // the known set; empty = none
  std::function<bool(const PacketHeader&, int path)> drop_on_path_if;  // empty = none
  double drop_fraction = 0;
  double duplicate_fraction = 0;
  double reorder_fraction = 0;
  uint64_t seed = 1;
  bool acks_too = false;
};

class FaultInjector : public PacketFaults {
 public:
  explicit FaultInjector(FaultPlan plan) : plan_(std::move(plan)), random_(plan_.seed) {}
  FaultAction decide(const PacketHeader& header, int path) override;

  uint64_t dropped() const { return dropped_; }
  uint64_t duplicated() const { return duplicated_; }
  uint64_t held_back() const { return held_back_; }

 private:
  FaultPlan plan_;
  std::mt19937_64 random_;
  uint64_t dropped_ = 0, duplicated_ = 0, held_back_ = 0;
};

}  // namespace mt::dist::dlcp
