// Collective bandwidth on the CPU: our Gloo process group against Gloo called directly on the
// same connected mesh, for message sizes 4 KiB .. 64 MiB.
//
//   build/release/apps/bench/bench_collectives --ranks 2        # forks 2 local ranks itself
//   build/release/apps/bench/bench_collectives --ranks 2,4
//   mintrain launch --nproc-per-node 4 -- ...                   # (not needed: it forks)
//
// Columns (nccl-tests conventions): time per operation, algbw = bytes / time, busbw = algbw *
// 2(n-1)/n for allreduce and algbw * (n-1)/n for allgather (bytes = the whole output), which
// is what each link carries and so comparable across rank counts. Rows:
//   ours            ProcessGroup::allreduce (comm thread, tag, Work::wait)
//   gloo ring       gloo::allreduce with Algorithm::RING called directly
//   gloo chunked    the old gloo::AllreduceRingChunked class
//   ours allgather  ProcessGroup::allgather (Gloo's ring allgather)
// MPI_Allreduce is measured by bench_mpi_allreduce (run it with mpirun) when MPI is installed.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>

#include "core/tensor.h"
#include "dist/gloo_process_group.h"
#include "dist/socket.h"
#include "dist/tcp_store.h"

using mt::core::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

// Iterations per size: enough bytes to time, few enough to finish quickly on 2 cores.
int iterations_for(size_t bytes) {
  const size_t budget = size_t(256) << 20;
  return static_cast<int>(std::max<size_t>(3, std::min<size_t>(50, budget / bytes)));
}

// Mean seconds per call of f over `iters` calls, the slowest rank's (all ranks start together).
template <typename F>
double time_op(mt::dist::ProcessGroup& g, int iters, F&& f) {
  f();  // warm-up
  g.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  Tensor t = Tensor::full({1}, s);
  g.allreduce(t, mt::dist::ReduceOp::Max)->wait();
  return t.item();
}

void row(int rank, const char* name, size_t bytes, double seconds, double bus_factor) {
  if (rank != 0) return;
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  std::printf("%10zu  %-16s %10.1f %9.3f %9.3f\n", bytes, name, seconds * 1e6, algbw, algbw * bus_factor);
  std::fflush(stdout);
}

void bench_rank(int rank, int n, int port) {
  mt::dist::TCPStoreOptions so;
  so.port = port;
  so.is_server = rank == 0;
  so.timeout = std::chrono::seconds(60);
  so.rank = rank;
  auto store = std::make_shared<mt::dist::TCPStore>(so);
  mt::dist::ProcessGroupOptions po;
  po.hostname = "127.0.0.1";
  po.timeout = std::chrono::seconds(120);
  auto group = mt::dist::GlooProcessGroup::create(store, rank, n, po);
  auto ctx = group->gloo_context();
  if (rank == 0) {
    std::printf("\n%d ranks, gloo/tcp over loopback\n%10s  %-16s %10s %9s %9s\n", n, "bytes", "what", "time(us)",
                "algbw GB/s", "busbw GB/s");
  }
  const double ar_bus = 2.0 * (n - 1) / n;
  const double ag_bus = static_cast<double>(n - 1) / n;
  uint32_t tag = 1u << 20;  // direct calls use tags far from the group's own counter
  for (size_t bytes = 4096; bytes <= (size_t(64) << 20); bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    const int iters = iterations_for(bytes);
    Tensor t = Tensor::full({static_cast<int64_t>(count)}, 1.0);
    row(rank, "ours", bytes, time_op(*group, iters, [&] { group->allreduce(t)->wait(); }), ar_bus);
    // Gloo directly, on the same mesh, from this thread (the group is idle between our calls).
    float* p = t.data<float>();
    row(rank, "gloo ring", bytes, time_op(*group, iters, [&] {
          gloo::AllreduceOptions o(ctx);
          o.setOutput(p, count);
          o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          o.setTag(tag++);
          gloo::allreduce(o);
        }), ar_bus);
    {
      gloo::AllreduceRingChunked<float> chunked(ctx, {p}, static_cast<int>(count));
      row(rank, "gloo chunked", bytes, time_op(*group, iters, [&] { chunked.run(); }), ar_bus);
    }
    Tensor in = Tensor::full({static_cast<int64_t>(count / n)}, 1.0);
    Tensor out = Tensor::zeros({static_cast<int64_t>(count / n) * n});
    row(rank, "ours allgather", out.nbytes(), time_op(*group, iters, [&] { group->allgather(in, out)->wait(); }),
        ag_bus);
  }
  group->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts = {2, 4};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0) {
      counts.clear();
      std::string list = argv[i + 1];
      for (size_t pos = 0; pos < list.size();) {
        const size_t comma = list.find(',', pos);
        counts.push_back(std::stoi(list.substr(pos, comma - pos)));
        pos = comma == std::string::npos ? list.size() : comma + 1;
      }
    }
  }
  for (const int n : counts) {
    const int port = mt::dist::net::pick_free_port();
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        int code = 0;
        try {
          bench_rank(r, n, port);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", r, e.what());
          code = 1;
        }
        std::fflush(stdout);
        ::_exit(code);
      }
      pids.push_back(pid);
    }
    int failed = 0;
    for (const pid_t p : pids) {
      int status = 0;
      ::waitpid(p, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (failed) return 1;
  }
  return 0;
}
