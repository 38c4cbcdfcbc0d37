// ByteScheduler's credit search: candidate credits in turn, each for `iters` exchanges; the first
// interval of each is not counted (it began under the previous candidate), and the candidate
// with the least mean iteration time wins (the first of equal ones). The paper tunes the credit
// by Bayesian optimisation; a few doublings measured on the job itself find the same knee.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/strings.h"

namespace mt::dist {

class CreditSearch {
 public:
  CreditSearch() = default;
  CreditSearch(const std::vector<int64_t>& credits, int iters) : iters_(iters) {
    for (int64_t c : credits) candidates_.push_back({c});
  }

  bool searching() const { return pos_ < candidates_.size(); }
  int64_t current() const { return candidates_[searching() ? pos_ : chosen_].credit; }  // credits given
  size_t size() const { return candidates_.size(); }

  // Exchange `exchange` (counted from 0) took `seconds` of an iteration: true when it ended the
  // search (current() is then the choice).
  bool record(int64_t exchange, double seconds) {
    if (!searching()) return false;
    if (exchange % iters_ != 0) {
      candidates_[pos_].seconds += seconds;
      ++candidates_[pos_].samples;
    }
    if ((exchange + 1) % iters_ != 0 || ++pos_ < candidates_.size()) return false;
    for (size_t i = 1; i < candidates_.size(); ++i)
      if (mean(candidates_[i]) < mean(candidates_[chosen_])) chosen_ = i;
    return true;
  }

  // "64 KB 12.3 ms; 128 KB 10.1 ms; ..." with `name` for a credit's size.
  template <typename Name>
  std::string describe(Name name) const {
    std::string out;
    for (const Candidate& c : candidates_) out += " " + name(c.credit) + core::formatted(" %.4g ms;", mean(c) * 1e3);
    return out;
  }

 private:
  struct Candidate {
    int64_t credit;
    double seconds = 0;
    int samples = 0;
  };
  static double mean(const Candidate& c) { return c.samples > 0 ? c.seconds / c.samples : 1e30; }

  std::vector<Candidate> candidates_;
  int iters_ = 1;
  size_t pos_ = 0;
  size_t chosen_ = 0;
};

}  // namespace mt::dist
