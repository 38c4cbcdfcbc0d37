// Which ranks left a collective hanging. When one rank is stopped (SIGSTOP, a debugger) or stuck
// (in compute, in I/O), the others time out in their collective and the first of them to exit
// looks like the culprit ("rank 0 exited"). A stuck rank cannot speak for itself, so the ranks
// that timed out take a roll call: each checks in at the store and waits a short window for the
// group's other members; those that never check in are the ones everybody waited for.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "dist/comm/store.h"

namespace mt::dist {

// The longest a timed-out operation spends on the roll call (CommQueue's waits allow for it).
inline constexpr std::chrono::milliseconds kMaxRollCall{5000};

// Called by a member whose collective timed out. `members` are the group's members as world
// ranks, `me` this rank's index among them, `prefix` the group's key prefix in the store. Waits
// at most about `window` (its store calls give up after it too, as the store's host may be the
// stopped one). Returns a sentence for the timeout's error: which ranks did not answer, that the
// store's host does not answer, or "" when every member checked in (nobody is to blame alone).
std::string name_silent_ranks(const Store& store, const std::string& prefix, int me,
                              const std::vector<int>& members, std::chrono::milliseconds window);

}  // namespace mt::dist
