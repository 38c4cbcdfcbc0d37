#include "dist/bytescheduler/bytescheduler_queue.h"

#include "core/error.h"

namespace mt::dist {

CreditQueue::CreditQueue(std::vector<int64_t> bytes, int64_t credit_bytes) : bytes_(std::move(bytes)) {
  for (size_t k = 0; k < bytes_.size(); ++k)
    MT_CHECK(bytes_[k] >= 0, "CreditQueue: item ", k, " has ", bytes_[k], " bytes");
  set_credit(credit_bytes);
  reset();
}

void CreditQueue::set_credit(int64_t credit_bytes) {
  MT_CHECK(credit_bytes >= 1, "dist.bytescheduler.credit_bytes must be >= 1 byte once training runs (got ",
           credit_bytes, "); 0 in the config asks for the start-up search");
  credit_ = credit_bytes;
}

void CreditQueue::reset() {
  state_.assign(bytes_.size(), State::Waiting);
  ready_.clear();
  in_flight_ = 0;
  sent_count_ = finished_count_ = 0;
}

void CreditQueue::mark_ready(size_t item) {
  MT_CHECK(item < bytes_.size(), "CreditQueue: item ", item, " of ", bytes_.size());
  if (state_[item] != State::Waiting) return;
  state_[item] = State::Ready;
  ready_.insert(item);
}

std::optional<size_t> CreditQueue::next() {
  if (ready_.empty()) return std::nullopt;
  const size_t item = *ready_.begin();
  if (in_flight_ > 0 && in_flight_ + bytes_[item] > credit_) return std::nullopt;
  ready_.erase(ready_.begin());
  state_[item] = State::InFlight;
  in_flight_ += bytes_[item];
  ++sent_count_;
  return item;
}

void CreditQueue::finished(size_t item) {
  MT_CHECK(item < bytes_.size() && state_[item] == State::InFlight, "CreditQueue: item ", item,
           " finished but it was not in flight");
  state_[item] = State::Finished;
  in_flight_ -= bytes_[item];
  ++finished_count_;
}

}  // namespace mt::dist
