#include "dist/comm/silent_ranks.h"

#include <thread>

#include "core/error.h"

namespace mt::dist {

namespace {

std::string world_ranks(const std::vector<int>& indices, const std::vector<int>& members) {
  std::string out;
  for (const int i : indices) out += (out.empty() ? "" : ", ") + std::to_string(members[static_cast<size_t>(i)]);
  return out;
}

// The store's host is world rank 0 (rendezvous and the tests both put it there).
std::string store_host_silent(const std::string& error) {
  if (error.find("timed out") != std::string::npos) {
    return "the store's host, rank 0, does not answer either: it is stopped or stuck; look at rank 0 "
           "(store: " + error + ")";
  }
  return "could not ask the other ranks who is still there, the store (on rank 0) is gone: rank 0 "
         "exited; see its output (store: " + error + ")";
}

}  // namespace

std::string name_silent_ranks(const Store& store, const std::string& prefix, int me,
                              const std::vector<int>& members, std::chrono::milliseconds window) {
  auto key = [&](int index) { return prefix + "/timed_out/" + std::to_string(index); };
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::shared_ptr<Store> probe;
  try {
    probe = store.with_timeout(window);
    probe->set(key(me), {1});
  } catch (const core::Error& e) {
    return store_host_silent(e.what());
  }
  std::vector<int> silent;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    if (i != me) silent.push_back(i);
  }
  bool asked = false;  // one whole round of checks answered
  while (!silent.empty() && std::chrono::steady_clock::now() < deadline) {
    std::vector<int> still;
    try {
      for (const int i : silent) {
        if (!probe->check({key(i)})) still.push_back(i);
      }
    } catch (const core::Error& e) {
      // The store went away mid-roll-call (its host finished its own and exited): what we saw
      // so far is the answer, if we saw anything at all.
      if (!asked) return store_host_silent(e.what());
      break;
    }
    asked = true;
    silent.swap(still);
    if (!silent.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (silent.empty()) return "";
  return "rank(s) " + world_ranks(silent, members) + " did not answer: they did not time out like this " +
         "rank within " + seconds_number(window) + " s" + ", so they never reached this collective or are stuck " +
         "in it (stopped, hung, or far slower than the others); look at them first";
}

}  // namespace mt::dist
