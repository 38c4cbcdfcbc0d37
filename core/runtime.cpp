#include "core/runtime.h"

#include <cblas.h>
#include <omp.h>

namespace mt::core {

void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace mt::core
