// MPI_Allreduce bandwidth, the peer for bench_collectives' table (same sizes and columns).
//
//   mpirun -np 4 --allow-run-as-root --oversubscribe build/release/apps/bench/bench_mpi_allreduce
//   (add --mca btl tcp,self to force TCP instead of shared memory)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank == 0) std::printf("\n%d ranks, MPI_Allreduce\n%10s  %-16s %10s %9s %9s\n", n, "bytes", "what", "time(us)", "algbw GB/s", "busbw GB/s");
  for (size_t bytes = 4096; bytes <= (size_t(64) << 20); bytes *= 4) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> buf(static_cast<size_t>(count), 1.0f);
    const int iters = static_cast<int>(std::max<size_t>(3, std::min<size_t>(50, (size_t(256) << 20) / bytes)));
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double s = (MPI_Wtime() - t0) / iters, worst = 0;
    MPI_Reduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double algbw = static_cast<double>(bytes) / worst / 1e9;
      std::printf("%10zu  %-16s %10.1f %9.3f %9.3f\n", bytes, "MPI_Allreduce", worst * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
    }
  }
  MPI_Finalize();
  return 0;
}
