// What dist.algorithm "auto" decides with, apart from the synchronizers themselves: which
// measured candidate is fastest, and when the iteration time has drifted far enough to decide
// again. Pure functions of agreed numbers (agreed below), so every rank decides alike (and tests
// feed them tables).
#pragma once
#include <cstddef>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

// Collective: `values` reduced over the ranks by `op`, then (but for a maximum, exact in any
// order) rank 0's result everywhere, so the numbers a decision compares are bit-equal everywhere.
std::vector<float> agreed(ProcessGroup& group, std::vector<float> values, ReduceOp op);

// The index of the least time, the first of equals (candidates come best predicted first, so a
// tie goes to the better prediction). A time < 0 was not measured and is never chosen; an
// Error when none was.
size_t fastest(const std::vector<double>& seconds);

// After a decision: every `window` iterations the window's mean iteration time (the slowest
// rank's, agreed by the caller) is compared with the time the choice was measured at. More than
// `share` above it fires once: the caller decides again, measuring under the new conditions, and
// rebases on the new winner's time, so lasting contention does not fire again. At most
// `max_fires` times in a run.
class DriftWatch {
 public:
  DriftWatch(double share, int window, int max_fires) : share_(share), window_(window), max_fires_(max_fires) {}
  // The seconds per iteration the current choice was measured at; 0: the next window's mean.
  void rebase(double seconds);
  // One iteration's seconds; true when a window is complete (then window_mean, and drifted
  // with the mean agreed across ranks).
  bool add(double seconds);
  double window_mean() const { return sum_ / window_; }
  bool drifted(double agreed_mean);
  int fires() const { return fires_; }
  double baseline() const { return baseline_; }

 private:
  double share_;
  int window_, max_fires_;
  double baseline_ = 0.0, sum_ = 0.0;
  int count_ = 0, fires_ = 0;
};

}  // namespace mt::dist
