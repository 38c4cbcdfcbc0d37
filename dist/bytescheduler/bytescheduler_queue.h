// ByteScheduler's queue, apart from any engine so it can be tested alone. Items in priority order
// (item 0 first): a ready item is handed over only while the bytes in flight plus its own stay
// within the credit, so a higher-priority item ready later overtakes lower ones still waiting.
// With nothing in flight one item always goes, even one larger than the credit.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace mt::dist {

class CreditQueue {
 public:
  // bytes[k]: item k's size. credit_bytes >= 1, else an Error naming dist.bytescheduler.credit_bytes.
  CreditQueue(std::vector<int64_t> bytes, int64_t credit_bytes);

  // A new round: nothing ready, nothing in flight, nothing finished.
  void reset();
  void set_credit(int64_t credit_bytes);
  int64_t credit() const { return credit_; }

  void mark_ready(size_t item);  // idempotent
  // The highest-priority ready item not yet sent, if the credit allows it (then it counts as in
  // flight); nothing otherwise.
  std::optional<size_t> next();
  // The engine is done with the item: its bytes return to the credit.
  void finished(size_t item);

  size_t size() const { return bytes_.size(); }
  bool all_sent() const { return sent_count_ == bytes_.size(); }
  bool all_finished() const { return finished_count_ == bytes_.size(); }
  int64_t bytes_in_flight() const { return in_flight_; }
  bool is_ready(size_t item) const { return state_.at(item) != State::Waiting; }

 private:
  enum class State { Waiting, Ready, InFlight, Finished };
  std::vector<int64_t> bytes_;
  int64_t credit_;
  std::vector<State> state_;
  std::set<size_t> ready_;  // ready, not sent: begin() is the highest priority
  int64_t in_flight_ = 0;
  size_t sent_count_ = 0, finished_count_ = 0;
};

}  // namespace mt::dist
