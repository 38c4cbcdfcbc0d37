#include "core/op_profile.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/synchronize.h"

namespace mt::core {
namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point start;
  double children = 0.0;  // seconds spent in scopes opened inside this one
};

// Recording happens on the profiling thread only, so these need no lock.
Device& waited_device() {
  static Device d = Device::cpu();
  return d;
}
void wait_for_device() {
  if (!waited_device().is_cpu()) synchronize(waited_device());
}

std::unordered_map<std::string, OpProfileEntry>& entries() {
  static std::unordered_map<std::string, OpProfileEntry> e;
  return e;
}
std::vector<Frame>& stack() {
  static std::vector<Frame> s;
  return s;
}

template <typename Name>
void leave(const Name& name) {
  wait_for_device();
  auto& s = stack();
  const Frame f = s.back();
  s.pop_back();
  const double total = std::chrono::duration<double>(Clock::now() - f.start).count();
  if (!s.empty()) s.back().children += total;
  auto& e = entries()[std::string(name)];
  if (e.name.empty()) e.name = name;
  e.seconds += total - f.children;
  ++e.calls;
}

}  // namespace

namespace detail {
thread_local bool profiling_thread = false;
void profile_enter() {
  wait_for_device();
  stack().push_back({Clock::now(), 0.0});
}
void profile_leave(const char* name) { leave(name); }
void profile_leave(const std::string& name) { leave(name); }
}  // namespace detail

void set_op_profiling(bool on, const Device& wait_for) {
  detail::profiling_thread = on;
  waited_device() = wait_for;
}
bool op_profiling() { return detail::profiling_thread; }
void reset_op_profile() { entries().clear(); }

std::vector<OpProfileEntry> op_profile() {
  std::vector<OpProfileEntry> v;
  for (const auto& [name, e] : entries()) v.push_back(e);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return v;
}

}  // namespace mt::core
