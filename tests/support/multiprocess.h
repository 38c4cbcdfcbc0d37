// Multi-process tests on one machine: run_ranks(n, fn) forks n children, each a rank of a
// fresh job on loopback (rank 0 hosts a TCPStore on a free port; every rank builds the world
// process group), runs fn in each and reports how every rank ended.
//
// Inside fn, gtest assertions work as usual: a failed EXPECT/ASSERT, an uncaught exception or
// a crash makes that child exit non-zero, and the parent gets the failure text. An overall
// timeout kills the stragglers (SIGKILL), so a hung collective fails the test instead of
// hanging it. Typical use:
//
//   TEST(Dist, Allreduce) {
//     EXPECT_TRUE(mt::testing::run_ranks(4, [](mt::testing::RankContext& c) {
//       Tensor t = Tensor::full({8}, c.rank + 1);
//       c.group->allreduce(t)->wait();
//       EXPECT_EQ(t.to_vector()[0], 10.0f);
//     }).ok_or_report());
//   }
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/comm/process_group.h"
#include "dist/comm/store.h"

namespace mt::testing {

struct RankContext {
  int rank = 0;
  int size = 1;
  int port = 0;                                // the store's port on 127.0.0.1
  std::shared_ptr<dist::Store> store;          // a TCPStore (rank 0 hosts it)
  std::shared_ptr<dist::ProcessGroup> group;   // null when MultiprocessOptions::create_group is false
};

// Process group options for tests: gloo over loopback, 10 s timeout (a failing test fails fast).
inline dist::ProcessGroupOptions test_group_options() {
  dist::ProcessGroupOptions o;
  o.hostname = "127.0.0.1";
  o.timeout = std::chrono::seconds(10);
  return o;
}

struct MultiprocessOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // whole run; stragglers are killed
  dist::ProcessGroupOptions group = test_group_options();  // also the store's timeout
  bool create_group = true;         // false: only the store (for store/rendezvous tests)
  bool create_store = true;         // false: fn gets only rank/size/port (it does everything)
};

struct RankResult {
  int rank = 0;
  int exit_code = -1;    // the child's exit status (valid when signal == 0 and !killed)
  int signal = 0;        // the signal that ended it, if any
  bool killed = false;   // killed by us at the overall timeout
  std::string message;   // failures reported by the child (gtest failures, exceptions)
  bool ok() const { return !killed && signal == 0 && exit_code == 0; }
};

struct MultiprocessResult {
  std::vector<RankResult> ranks;
  bool ok() const;
  std::string report() const;  // one line per rank that did not end well, with its message
  // For EXPECT_TRUE(...): success, or failure carrying report().
  ::testing::AssertionResult ok_or_report() const;
};

using RankFn = std::function<void(RankContext&)>;

// Runs fn in n forked ranks and waits for all (or the timeout). The parent must not have other
// threads running that hold locks (true in gtest bodies).
MultiprocessResult run_ranks(int n, const RankFn& fn, MultiprocessOptions options = {});

// A free TCP port on this machine (bind to 0, read it back, close).
int free_port();

}  // namespace mt::testing
