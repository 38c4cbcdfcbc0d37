#include "core/runtime.h"

#include <cblas.h>
#include <dirent.h>
#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mt::core {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}

}  // namespace

int cgroup_cores(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<int>((quota_us + period_us - 1) / period_us);
}

int cgroup_cores(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return cgroup_cores(std::stoll(quota), period);
  } catch (const std::exception&) {
    return 0;
  }
}

int usable_cores() {
  int cores = omp_get_num_procs();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) cores = CPU_COUNT(&set);
  // cgroup v2, then v1 (the process's own cgroup is mounted at these paths in containers).
  int quota = cgroup_cores(read_file("/sys/fs/cgroup/cpu.max"));
  if (quota == 0) {
    const std::string q = read_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p = read_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!q.empty() && !p.empty()) quota = cgroup_cores(std::atoll(q.c_str()), std::atoll(p.c_str()));
  }
  if (quota > 0 && quota < cores) cores = quota;
  return cores > 0 ? cores : 1;
}

int default_threads(int usable, int local_ranks) {
  if (local_ranks < 1) local_ranks = 1;
  return usable / local_ranks > 0 ? usable / local_ranks : 1;
}

void set_num_threads(int n) {
  if (n <= 0) {
    // The environment decides first (OMP_NUM_THREADS): a test runner that runs several
    // suites at once sets it to 1 so that OpenMP threads do not fight. Then the usable cores,
    // shared by the ranks `mintrain launch` (or torchrun) started on this node.
    n = env_int("OMP_NUM_THREADS") > 0 ? env_int("OMP_NUM_THREADS")
                                       : default_threads(usable_cores(), env_int("LOCAL_WORLD_SIZE"));
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() { return omp_get_max_threads(); }

CpuSchedTimes cpu_sched_times() {
  CpuSchedTimes t;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return t;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    // "<ns on cpu> <ns waiting on a run queue> <timeslices>"
    std::istringstream in(read_file(std::string("/proc/self/task/") + e->d_name + "/schedstat"));
    double run_ns = 0, wait_ns = 0;
    if (in >> run_ns >> wait_ns) {
      t.running += run_ns * 1e-9;
      t.waiting += wait_ns * 1e-9;
    }
  }
  ::closedir(dir);
  return t;
}

}  // namespace mt::core
