// Collective bandwidth on the CPU: our Gloo process group against Gloo called directly on the
// same connected mesh, for message sizes 4 KiB .. 64 MiB.
//
//   build/release/apps/bench/bench_collectives --ranks 2        # forks 2 local ranks itself
//   build/release/apps/bench/bench_collectives --ranks 2,4
//   mintrain launch --nproc-per-node 4 -- ...                   # (not needed: it forks)
//
// Columns (nccl-tests conventions): mean time per operation (the slowest rank's), algbw = bytes / time, busbw = algbw *
// 2(n-1)/n for allreduce and algbw * (n-1)/n for allgather (bytes = the whole output), which
// is what each link carries and so comparable across rank counts; p50 and max are rank 0's
// median and slowest single operation (a mean far above p50 means stalls, not bandwidth). Rows:
//   ours            ProcessGroup::allreduce (comm thread, tag, Work::wait)
//   gloo ring       gloo::allreduce with Algorithm::RING called directly
//   gloo bcube      the same with Algorithm::BCUBE (only with --rows ...,bcube)
//   ours allgather  ProcessGroup::allgather (Gloo's ring allgather)
// MPI_Allreduce is measured by bench_mpi_allreduce (run it with mpirun) when MPI is installed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include "apps/flags.h"
#include "core/tensor.h"
#include "dist/comm/gloo_process_group.h"
#include "dist/comm/socket.h"
#include "dist/comm/tcp_store.h"

using mt::core::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchOptions {
  std::vector<int64_t> ranks = {2, 4};
  size_t min_bytes = 4096;
  size_t max_bytes = size_t(64) << 20;
  int iters = 0;                  // 0: by size (iterations_for)
  std::string rows = "ours,ring,allgather";
  size_t max_segment = 0;         // 0: Gloo's default for the direct "gloo ring" row
  bool wants(const char* row) const { return ("," + rows + ",").find(std::string(",") + row + ",") != std::string::npos; }
};

// Iterations per size: enough bytes to time, few enough to finish quickly on 2 cores.
int iterations_for(size_t bytes) {
  const size_t budget = size_t(256) << 20;
  return static_cast<int>(std::max<size_t>(3, std::min<size_t>(50, budget / bytes)));
}

struct Timing {
  double mean = 0;  // seconds per call, the slowest rank's mean
  double p50 = 0;   // rank 0's median call
  double max = 0;   // rank 0's slowest call: a stall (delayed ACK, scheduling) shows here first
};

// Times `iters` calls of f after one warm-up (all ranks start together after a barrier).
template <typename F>
Timing time_op(mt::dist::ProcessGroup& g, int iters, F&& f) {
  f();  // warm-up
  g.barrier();
  std::vector<double> each;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    f();
    each.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  Timing timing;
  timing.mean = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  std::sort(each.begin(), each.end());
  timing.p50 = each[each.size() / 2];
  timing.max = each.back();
  Tensor t = Tensor::full({1}, timing.mean);
  g.allreduce(t, mt::dist::ReduceOp::Max)->wait();
  timing.mean = t.item();
  return timing;
}

void row(int rank, const char* name, size_t bytes, const Timing& timing, double bus_factor) {
  if (rank != 0) return;
  const double algbw = static_cast<double>(bytes) / timing.mean / 1e9;
  std::printf("%10zu  %-16s %10.1f %9.3f %9.3f %10.1f %10.1f\n", bytes, name, timing.mean * 1e6, algbw,
              algbw * bus_factor, timing.p50 * 1e6, timing.max * 1e6);
  std::fflush(stdout);
}

void bench_rank(int rank, int n, int port, const BenchOptions& opt) {
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
    std::printf("\n%d ranks, gloo/tcp over loopback\n%10s  %-16s %10s %9s %9s %10s %10s\n", n, "bytes", "what",
                "time(us)", "algbw GB/s", "busbw GB/s", "p50(us)", "max(us)");
  }
  const double ar_bus = 2.0 * (n - 1) / n;
  const double ag_bus = static_cast<double>(n - 1) / n;
  uint32_t tag = 1u << 20;  // direct calls use tags far from the group's own counter
  for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    const int iters = opt.iters > 0 ? opt.iters : iterations_for(bytes);
    Tensor t = Tensor::full({static_cast<int64_t>(count)}, 1.0);
    if (opt.wants("ours")) {
      row(rank, "ours", bytes, time_op(*group, iters, [&] { group->allreduce(t)->wait(); }), ar_bus);
    }
    // Gloo directly, on the same mesh, from this thread (the group is idle between our calls).
    float* p = t.data<float>();
    for (const auto& [row_key, row_name, algorithm] :
         {std::tuple{"ring", "gloo ring", gloo::AllreduceOptions::Algorithm::RING},
          std::tuple{"bcube", "gloo bcube", gloo::AllreduceOptions::Algorithm::BCUBE}}) {
      if (!opt.wants(row_key)) continue;
      row(rank, row_name, bytes, time_op(*group, iters, [&, algorithm = algorithm] {
            gloo::AllreduceOptions o(ctx);
            o.setOutput(p, count);
            o.setAlgorithm(algorithm);
            o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
            o.setTag(tag++);
            if (opt.max_segment) o.setMaxSegmentSize(opt.max_segment);
            gloo::allreduce(o);
          }), ar_bus);
    }
    if (opt.wants("allgather")) {
      Tensor in = Tensor::full({static_cast<int64_t>(count / n)}, 1.0);
      Tensor out = Tensor::zeros({static_cast<int64_t>(count / n) * n});
      row(rank, "ours allgather", out.nbytes(), time_op(*group, iters, [&] { group->allgather(in, out)->wait(); }),
          ag_bus);
    }
  }
  group->barrier();
}

// "4096", "64K", "1M": bytes.
size_t parse_bytes(const std::string& text) {
  size_t end = 0;
  const double v = std::stod(text, &end);
  const std::string unit = text.substr(end);
  const double scale = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : -1;
  if (scale < 0) throw std::invalid_argument("unknown size unit \"" + unit + "\" (use K or M)");
  return static_cast<size_t>(v * scale);
}

const char* kUsage =
    "usage: bench_collectives [--ranks 2,4] [--min 4K] [--max 64M] [--iters N]\n"
    "                         [--rows ours,ring,bcube,allgather] [--max-segment BYTES]\n"
    "  Forks the local ranks itself (Gloo over TCP loopback) and prints one row per size\n"
    "  (x4 from --min to --max) and algorithm. --iters 0 (default) picks by size;\n"
    "  --max-segment sets Gloo's maxSegmentSize for the direct \"ring\" row only.\n";

}  // namespace

int main(int argc, char** argv) {
  BenchOptions opt;
  try {
    mt::apps::Flags f("bench_collectives", {argv + 1, argv + argc});
    while (f.next()) {
      if (f.is("--help") || f.is("-h")) {
        std::fputs(kUsage, stdout);
        return 0;
      }
      if (f.is("--ranks")) opt.ranks = mt::apps::parse_int_list("--ranks", f.value(), 1, 64, "a rank count");
      else if (f.is("--min")) opt.min_bytes = parse_bytes(f.value());
      else if (f.is("--max")) opt.max_bytes = parse_bytes(f.value());
      else if (f.is("--iters")) opt.iters = f.integer(0);
      else if (f.is("--rows")) opt.rows = f.value();
      else if (f.is("--max-segment")) opt.max_segment = parse_bytes(f.value());
      else f.unknown();
    }
    if (opt.min_bytes < 4096 || opt.min_bytes > opt.max_bytes) throw std::invalid_argument("need 4K <= --min <= --max");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n%s", e.what(), kUsage);
    return 2;
  }
  for (const int n : opt.ranks) {
    const int port = mt::dist::net::pick_free_port();
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        int code = 0;
        try {
          bench_rank(r, n, port, opt);
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
