// Timeline: an optional per-rank trace of one run in Chrome's trace-event format (open it in
// chrome://tracing or https://ui.perfetto.dev). Each event is a complete span ("ph": "X") with
// ts/dur in microseconds, pid = rank and tid = the lane: compute (forward, backward, waits, the
// optimizer step) or comm (each message's allreduce). Seeing the comm lane overlap the backward
// span is the whole point of WFBP/FUSION/MG-WFBP.
//
// Times are taken from steady_clock (CLOCK_MONOTONIC on Linux, shared by the processes of one
// machine), so the traces of local ranks line up when loaded together.
#pragma once
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace mt::dist {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  enum Lane { kCompute = 0, kComm = 1 };

  // `path` may contain "{rank}", replaced by the rank. max_events bounds memory on long runs
  // (events past it are counted, not kept).
  Timeline(std::string path, int rank, size_t max_events = 500000);

  void add(const std::string& name, Lane lane, Clock::time_point start, Clock::time_point end,
           const std::string& args_json = "");
  // Writes the trace (atomically: a temporary file, then rename). Returns the path written.
  std::string write() const;
  const std::string& path() const { return path_; }
  size_t size() const;

  // The file name for `rank`: "{rank}" replaced.
  static std::string path_for(const std::string& pattern, int rank);

 private:
  struct Event {
    std::string name;
    Lane lane;
    double ts_us, dur_us;
    std::string args;
  };
  std::string path_;
  int rank_;
  size_t max_events_;
  mutable std::mutex mu_;  // events may come from the compute and the comm side
  std::vector<Event> events_;
  size_t dropped_ = 0;
};

// Records [construction, destruction) as one span; a null timeline records nothing.
class TimelineSpan {
 public:
  TimelineSpan(Timeline* timeline, std::string name, Timeline::Lane lane = Timeline::kCompute)
      : timeline_(timeline), name_(std::move(name)), lane_(lane), start_(Timeline::Clock::now()) {}
  ~TimelineSpan() {
    if (timeline_) timeline_->add(name_, lane_, start_, Timeline::Clock::now());
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  Timeline* timeline_;
  std::string name_;
  Timeline::Lane lane_;
  Timeline::Clock::time_point start_;
};

}  // namespace mt::dist
