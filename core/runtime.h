// Process-wide CPU runtime settings: how many threads our kernels use.
#pragma once
#include <string>

namespace mt::core {


// Sets the number of OpenMP threads for our kernels (0 = OMP_NUM_THREADS if set, else
// usable_cores() shared among the ranks of this node) and pins OpenBLAS to one thread, since
// our kernels parallelize around BLAS calls themselves.
void set_num_threads(int n);
int num_threads();

// The cores this process may run on: the CPUs of its affinity mask, capped by its cgroup's CPU
// quota (a container or a Slurm job often allows fewer cores than the machine has).
int usable_cores();
// The quota in a cgroup v2 "cpu.max" text ("200000 100000" = 2 cores, "max 100000" = none) or
// cgroup v1's quota and period; 0 when there is none. Rounded up to whole cores.
int cgroup_cores(const std::string& cpu_max);
int cgroup_cores(long long quota_us, long long period_us);
// The default thread count: usable cores divided among `local_ranks` processes, at least 1.
int default_threads(int usable, int local_ranks);

// How long this process's threads have run on a CPU and waited in a run queue for one, in
// seconds (Linux schedstat; zeros where it is not reported). Waiting about as long as running
// means another process takes the cores: everything runs at half speed or less.
struct CpuSchedTimes {
  double running = 0.0;
  double waiting = 0.0;
};
CpuSchedTimes cpu_sched_times();

}  // namespace mt::core
