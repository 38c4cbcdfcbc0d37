// Process-wide CPU runtime settings: how many threads our kernels use.
#pragma once

namespace mt::core {

// Sets the number of OpenMP threads for our kernels (0 = OMP_NUM_THREADS if set,
// else all cores) and pins OpenBLAS to one
// thread, since our kernels parallelize around BLAS calls themselves.
void set_num_threads(int n);
int num_threads();

}  // namespace mt::core
