#include "core/runtime.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>

namespace mt::core {

void set_num_threads(int n) {
  if (n <= 0) {
    // "All cores", unless the environment says otherwise (OMP_NUM_THREADS): a test runner
    // that runs several suites at once sets it to 1 so that OpenMP threads do not fight.
    const char* env = std::getenv("OMP_NUM_THREADS");
    n = env && std::atoi(env) > 0 ? std::atoi(env) : omp_get_num_procs();
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace mt::core
