// S-SGD schedules head to head: iteration time of BSP, WFBP, FUSION and MG-WFBP for one model on
// N local ranks (forked processes, Gloo over TCP loopback), next to the cost model's prediction
// (dist/cost_model.h) from the profiled per-parameter backward times and the fitted
// T(M) = alpha + beta*M. Prints one table on rank 0, with two more rows in the same run:
//   COMPUTE  every rank trains on its own (forward, backward, SGD step; no synchronizer), all at
//            once: the compute alone, as the ranks share the machine
//   CDSGD    CD-SGD as `mintrain train` builds it (dist.algorithm "cdsgd", TWO_BIT tau 0.5 on the
//            per-sample-sum scale, momentum correction), full precision for the warm-up
//            iterations and then every --cdsgd-k-th (0: never)
//
//   bench_schedules [--nproc 4] [--model resnet20] [--batch 32] [--iters 8] [--warmup 3]
//                   [--threads 1] [--master-addr 127.0.0.1] [--interface IF] [--cdsgd-k 0]
//
// Caveat printed with the table: on a small machine the ranks share cores, so communication
// (Gloo's threads) and computation compete; the model assumes they run on separate resources.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <google/protobuf/text_format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/predict/cost_model.h"
#include "dist/registry.h"
#include "dist/comm/rendezvous.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int nproc = 4, batch = 32, iters = 8, warmup = 3, threads = 1, cdsgd_k = 0;
  std::string model = "resnet20", master_addr = "127.0.0.1", interface;
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// User + system CPU seconds of this thread (RUSAGE_THREAD) or of the whole process.
double cpu_seconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Measured {
  double iteration = 0, forward = 0, backward = 0, update = 0;
  // CPU seconds per iteration: the training thread, and every other thread of the process
  // (our communication thread, Gloo's loop thread, the kernel's work on our sockets).
  double cpu_main = 0, cpu_other = 0;
};

int rank_main(const Args& args) {
  core::set_num_threads(args.threads);
  dist::ProcessGroupOptions po;
  po.interface = args.interface;
  po.timeout = std::chrono::seconds(120);
  const dist::Rendezvous rdv = dist::rendezvous(dist::world_from_env(), po);
  const int rank = rdv.group->rank(), n = rdv.group->size();

  layers::ModelOptions mo;
  mo.in_channels = 3;
  mo.image_size = 32;
  core::Generator data_gen(100 + rank);
  core::Tensor x = core::rand_uniform({args.batch, 3, 32, 32}, -1.f, 1.f, data_gen);
  std::vector<int64_t> labels(args.batch);
  for (int i = 0; i < args.batch; ++i) labels[i] = (i + rank) % 10;
  const core::Tensor y = core::Tensor::from_vector(labels, {args.batch});

  std::vector<dist::LayerCost> layers;  // from MG-WFBP's profile
  dist::LinearCost cost;
  // The four S-SGD schedules, then the compute alone and CD-SGD (rows COMPUTE and CDSGD).
  constexpr int kSchedules = 4, kCompute = 4, kCdsgd = 5, kRuns = 6;
  Measured m[kRuns];
  const dist::Schedule order[kSchedules] = {dist::Schedule::MGWFBP, dist::Schedule::BSP, dist::Schedule::WFBP,
                                            dist::Schedule::FUSION};
  for (int k = 0; k < kRuns; ++k) {
    core::Generator gen(1);
    auto model = layers::build_model(args.model, mo, gen);  // fresh: hooks belong to one synchronizer
    optim::OptimizerOptions oo;
    oo.lr = 0.01;
    oo.momentum = 0.9;
    std::unique_ptr<dist::Synchronizer> sync;
    dist::SsgdSynchronizer* ssgd = nullptr;
    int warmup = args.warmup;
    if (k < kSchedules) {
      dist::SsgdOptions so;
      so.schedule = order[k];
      so.profile_iters = args.warmup;
      so.config_text = "bench";
      auto s = std::make_unique<dist::SsgdSynchronizer>(rdv.group, so);
      ssgd = s.get();
      sync = std::move(s);
      if (order[k] == dist::Schedule::MGWFBP) warmup += 2;
    } else if (k == kCompute) {
      sync = dist::make_synchronizer(nullptr, mintrain::RunConfig());  // one process's: no exchange
    } else {
      // What `mintrain train` builds for dist.algorithm "cdsgd" with TWO_BIT and these settings.
      const std::string text = "data { batch_size: " + std::to_string(args.batch) +
                               " } optimizer { name: \"sgd\" lr: 0.01 momentum: 0.9 } dist { algorithm: \"cdsgd\""
                               " timeout_seconds: 120 compressor { type: \"two_bit\" } cdsgd { k: " +
                               std::to_string(args.cdsgd_k) + " warmup_iters: " + std::to_string(args.warmup) + " } }";
      mintrain::RunConfig run;
      MT_CHECK(google::protobuf::TextFormat::ParseFromString(text, &run), "bench: bad CD-SGD config: ", text);
      sync = dist::make_synchronizer(rdv.group, run, "bench");
      warmup += 2;  // the first delayed steps too: timed iterations are all compressed and delayed
    }
    if (sync->takes_over_momentum()) oo.momentum = 0.0;  // momentum correction: as the trainer
    auto opt = std::make_unique<optim::StepGuard>(optim::build_optimizer("sgd", model->parameters(), oo), 0.0);
    sync->setup(*model, *opt);
    model->train();
    for (int it = 0; it < warmup + args.iters; ++it) {
      if (it == warmup) {
        rdv.group->barrier();
        m[k].cpu_main = -cpu_seconds(RUSAGE_THREAD);
        m[k].cpu_other = -cpu_seconds(RUSAGE_SELF) - m[k].cpu_main;
      }
      const auto t0 = Clock::now();
      sync->begin_iteration(it);
      const core::Tensor loss = core::cross_entropy(model->forward(x), y);
      const auto t1 = Clock::now();
      loss.backward();
      const auto t2 = Clock::now();
      if (!sync->end_iteration(*opt)) opt->step();
      opt->zero_grad();
      const auto t3 = Clock::now();
      if (it >= warmup) {
        m[k].iteration += secs(t0, t3) / args.iters;
        m[k].forward += secs(t0, t1) / args.iters;
        m[k].backward += secs(t1, t2) / args.iters;
        m[k].update += secs(t2, t3) / args.iters;
      }
    }
    {
      const double main_now = cpu_seconds(RUSAGE_THREAD), all_now = cpu_seconds(RUSAGE_SELF);
      m[k].cpu_main = (m[k].cpu_main + main_now) / args.iters;
      m[k].cpu_other = (m[k].cpu_other + all_now - main_now) / args.iters;
    }
    if (ssgd && order[k] == dist::Schedule::MGWFBP) {
      // Per-parameter layers in forward order (hook order reversed) for the cost model.
      const auto& tb = ssgd->profiled_backward();
      const auto& hook = ssgd->hook_order();
      const auto params = opt->params();
      layers.resize(tb.size());
      for (size_t pos = 0; pos < tb.size(); ++pos) {
        auto& l = layers[tb.size() - 1 - pos];
        l.backward = tb[pos];
        l.bytes = static_cast<double>(params[hook[pos]].numel()) * 4.0;
      }
      cost = ssgd->cost();
      if (rank == 0)
        std::printf("MG-WFBP plan: %zu messages for %zu gradients; alpha %.1f us, beta %.3f ms/MB, gamma %.1f us\n",
                    ssgd->buckets().size(), tb.size(), cost.alpha * 1e6, cost.beta * 1048576e3, cost.gamma * 1e6);
    }
  }
  if (rank != 0) return 0;

  // The model's compute: forward spread evenly over layers; backward profiled per parameter
  // (scaled to the measured backward total: the profile misses the part before the first hook).
  double tb_sum = 0;
  for (const auto& l : layers) tb_sum += l.backward;
  const Measured& ref = m[1];  // BSP: compute undisturbed by overlapping communication
  for (auto& l : layers) {
    l.forward = ref.forward / layers.size();
    if (tb_sum > 0) l.backward *= ref.backward / tb_sum;
  }
  double total_bytes = 0;
  for (const auto& l : layers) total_bytes += l.bytes;
  std::printf("\n%s, batch %d per rank, %d ranks (gloo/tcp), %d threads per rank, %d iterations\n",
              args.model.c_str(), args.batch, n, args.threads, args.iters);
  std::printf("gradients %.2f MB in %zu tensors; measured forward %.1f ms, backward %.1f ms (BSP run)\n",
              total_bytes / 1048576, layers.size(), ref.forward * 1e3, ref.backward * 1e3);
  std::printf("| schedule | iteration ms | forward+backward ms | wait+update ms | img/s (all ranks) | "
              "predicted ms | predicted/measured | CPU ms: training thread | CPU ms: other threads |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  const double update_s = 0.0;  // the optimizer step is inside our "wait+update"; tiny for SGD
  for (int k : {1, 2, 3, 0}) {
    const auto p = dist::predict_schedule(order[k], layers, cost, update_s, 25.0 * 1048576, 1.0 * 1048576);
    std::printf("| %s | %.1f | %.1f | %.1f | %.0f | %.1f | %.2f | %.1f | %.1f |\n",
                dist::schedule_name(order[k]).c_str(), m[k].iteration * 1e3,
                (m[k].forward + m[k].backward) * 1e3, m[k].update * 1e3, n * args.batch / m[k].iteration,
                p.iteration * 1e3, p.iteration / m[k].iteration, m[k].cpu_main * 1e3, m[k].cpu_other * 1e3);
  }
  // No prediction for these two (the cost model's schedules are S-SGD's).
  for (int k : {kCompute, kCdsgd})
    std::printf("| %s | %.1f | %.1f | %.1f | %.0f | | | %.1f | %.1f |\n", k == kCompute ? "COMPUTE" : "CDSGD",
                m[k].iteration * 1e3, (m[k].forward + m[k].backward) * 1e3, m[k].update * 1e3,
                n * args.batch / m[k].iteration, m[k].cpu_main * 1e3, m[k].cpu_other * 1e3);
  std::printf("CDSGD: TWO_BIT tau 0.5 per-sample sum, momentum correction, k %d (full precision every k-th; 0: "
              "never), %d full-precision warm-up iterations before the timed ones\n",
              args.cdsgd_k, args.warmup);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--nproc") a.nproc = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--model") a.model = v;
    else if (k == "--master-addr") a.master_addr = v;
    else if (k == "--interface") a.interface = v;
    else if (k == "--cdsgd-k") a.cdsgd_k = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (std::getenv("RANK")) {  // started by a launcher: be one rank
    try {
      return rank_main(a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
      return 1;
    }
  }
  const int port = free_port();
  std::vector<pid_t> kids;
  for (int r = 0; r < a.nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      int rc = 1;
      try {
        rc = rank_main(a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : kids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}
