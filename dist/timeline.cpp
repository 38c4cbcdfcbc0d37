#include "dist/timeline.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_escape.h"
#include "core/strings.h"

namespace mt::dist {
namespace {

double micros(Timeline::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

std::string Timeline::path_for(const std::string& pattern, int rank) {
  std::string p = pattern;
  const std::string key = "{rank}";
  for (size_t at = p.find(key); at != std::string::npos; at = p.find(key, at))
    p.replace(at, key.size(), std::to_string(rank));
  return p;
}

Timeline::Timeline(std::string path, int rank, size_t max_events)
    : path_(path_for(path, rank)), rank_(rank), max_events_(max_events) {}

void Timeline::add(const std::string& name, Lane lane, Clock::time_point start,
                   Clock::time_point end, const std::string& args_json) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back({name, lane, micros(start), micros(end) - micros(start), args_json});
}

size_t Timeline::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string Timeline::write() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::filesystem::path target(path_);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    MT_CHECK(out.is_open(), "rank ", rank_, ": cannot write the timeline \"", path_,
             "\"; set dist.timeline_file to a writable path or \"\"");
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    // Lane names, so the viewer shows "rank 0 / compute" instead of numbers.
    out << core::formatted("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                           rank_, rank_);
    for (int lane = 0; lane < 2; ++lane)
      out << core::formatted(
          ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", rank_, lane,
          lane == kCompute ? "compute" : "comm");
    for (const Event& e : events_) {
      out << core::formatted(",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,", rank_,
                             static_cast<int>(e.lane), e.ts_us, e.dur_us)
          << "\"name\":\"" << core::json_escape(e.name) << "\"";
      if (!e.args.empty()) out << ",\"args\":" << e.args;
      out << "}";
    }
    out << "\n],\"otherData\":{\"dropped_events\":" << dropped_ << "}}\n";
    out.flush();
    MT_CHECK(out.good(), "rank ", rank_, ": writing the timeline \"", path_, "\" failed");
  }
  std::filesystem::rename(tmp, path_);
  return path_;
}

}  // namespace mt::dist
