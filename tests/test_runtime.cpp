// The CPU budget (core/runtime.h): the default thread count from the affinity mask, the cgroup
// quota and the ranks sharing the node, and the run-queue times that tell a run its cores are
// taken by someone else.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/runtime.h"

using namespace mt::core;

TEST(CpuBudget, CgroupQuotaIsRoundedUpToWholeCores) {
  EXPECT_EQ(cgroup_cores("200000 100000\n"), 2);
  EXPECT_EQ(cgroup_cores("150000 100000"), 2);  // 1.5 cores: two threads, each busy 3/4
  EXPECT_EQ(cgroup_cores("50000 100000"), 1);
  EXPECT_EQ(cgroup_cores("max 100000\n"), 0);  // no quota
  EXPECT_EQ(cgroup_cores(""), 0);              // no cgroup v2 file
  EXPECT_EQ(cgroup_cores("garbage"), 0);
  EXPECT_EQ(cgroup_cores(-1, 100000), 0);       // cgroup v1's "no quota"
  EXPECT_EQ(cgroup_cores(400000, 100000), 4);
}

TEST(CpuBudget, TheCoresAreSharedAmongTheRanksOfANode) {
  EXPECT_EQ(default_threads(16, 0), 16);  // not under a launcher
  EXPECT_EQ(default_threads(16, 1), 16);
  EXPECT_EQ(default_threads(16, 4), 4);
  EXPECT_EQ(default_threads(2, 4), 1);  // never zero
  EXPECT_EQ(default_threads(8, 3), 2);
  const int usable = usable_cores();
  EXPECT_GE(usable, 1);
  EXPECT_LE(usable, static_cast<int>(std::thread::hardware_concurrency()));
}

TEST(CpuBudget, ThreadsThatOutnumberTheCoresAreSeenWaiting) {
  if (cpu_sched_times().running == 0.0) GTEST_SKIP() << "this kernel reports no /proc/self/task/*/schedstat";
  // Three spinning threads per usable core: each runs a third of the time at most and waits in
  // the run queue for the rest. Sampled while they are alive (a finished thread leaves
  // /proc/self/task, as the trainer's pools never do).
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 3 * usable_cores(); ++i) {
    spinners.emplace_back([&] {
      volatile unsigned long x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  const CpuSchedTimes start = cpu_sched_times();
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const CpuSchedTimes end = cpu_sched_times();
  stop = true;
  for (auto& t : spinners) t.join();
  const double ran = end.running - start.running, waited = end.waiting - start.waiting;
  EXPECT_GT(ran, 0.2) << "the spinners ran";
  EXPECT_GT(waited, ran) << "each spinner waited about twice as long as it ran: ran " << ran << " s, waited "
                         << waited << " s";
}
