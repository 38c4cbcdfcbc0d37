// Per-op time profile: where a training step spends its time, by kernel and backward node.
// Off by default; when on (set_op_profiling), every MT_DISPATCH kernel call, every backward
// node's apply() and any ProfileScope a caller opens add their *self* time (their own time
// minus that of scopes opened inside them) to an entry of that name, so the entries of a step
// sum to the time spent inside scopes and nothing is counted twice. A backward node's self time
// is what it spends outside kernels (allocating gradients, copies, bookkeeping).
// Only the thread that enables profiling records; scopes on other threads cost one load.
// Times are host time. On a GPU the host only queues kernels, so host time would be launch time:
// give set_op_profiling the GPU and every scope then waits for the device as it opens and as it
// closes, so its time is the time of the kernels it queued (plus one synchronize each, some
// microseconds), at the price of the overlap of launches with kernels, which profiling loses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace mt::core {

struct OpProfileEntry {
  std::string name;
  double seconds = 0.0;  // self time
  int64_t calls = 0;
};

void set_op_profiling(bool on, const Device& wait_for = Device::cpu());
bool op_profiling();
void reset_op_profile();
// The entries so far, largest self time first.
std::vector<OpProfileEntry> op_profile();

namespace detail {
extern thread_local bool profiling_thread;
void profile_enter();
void profile_leave(const char* name);
void profile_leave(const std::string& name);
}  // namespace detail

// Times the enclosing scope under `name` (a string literal, or a string that outlives it).
class ProfileScope {
 public:
  explicit ProfileScope(const char* name) : name_(name), on_(detail::profiling_thread) {
    if (on_) detail::profile_enter();
  }
  explicit ProfileScope(const std::string& name) : owned_(&name), on_(detail::profiling_thread) {
    if (on_) detail::profile_enter();
  }
  ~ProfileScope() {
    if (!on_) return;
    if (owned_) detail::profile_leave(*owned_);
    else detail::profile_leave(name_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* name_ = nullptr;
  const std::string* owned_ = nullptr;
  bool on_;
};

}  // namespace mt::core
