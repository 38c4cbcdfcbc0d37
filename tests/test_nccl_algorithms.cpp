// Every data-parallel algorithm on CUDA tensors: NCCL worlds of one rank (the GPU machine the
// project is lent has one GPU), the set-up (replica check, broadcasts of weights and buffers),
// two steps of a small MLP, the evaluation hand-over, the job's metric average and stop vote, and
// the weights compared with the same run on the CPU over Gloo. One rank sums nothing, so what
// these tests prove is that every collective the algorithms issue takes tensors NCCL accepts
// (device tensors on the communicator's GPU) and that the device arithmetic matches the CPU's;
// the multi-rank math is tested on the CPU (test_ssgd, test_dssync, ...). The parameter server
// is not an NCCL algorithm (its servers are CPU processes on Gloo): its test trains a GPU worker
// against a server thread over Gloo, device gradients staged through host memory.
//
// Every test starts with MT_REQUIRE_GPU(): without a usable GPU they skip visibly, and with
// MT_STRICT_GPU=1 (apps/scripts/gpu_check.sh) they fail instead. No test here forks: a process
// that has touched CUDA cannot hand it to a forked child.
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/ops/nn.h"
#include "core/tensor.h"
#include "dist/job.h"
#include "dist/comm/process_group.h"
#include "dist/ps/ps_server.h"
#include "dist/registry.h"
#include "dist/replicas.h"
#include "dist/comm/tcp_store.h"
#include "support/dist_training.h"
#include "support/gradcheck.h"
#include "support/multiprocess.h"

namespace mt {
namespace {

using core::Device;
using core::Tensor;

constexpr int64_t kImage = 4, kClasses = 3, kRows = 8;
constexpr int kSteps = 2;

std::shared_ptr<dist::TCPStore> local_store() {
  dist::TCPStoreOptions so;
  so.port = 0;
  so.is_server = true;
  so.rank = 0;
  so.timeout = std::chrono::seconds(60);
  return std::make_shared<dist::TCPStore>(so);
}

std::shared_ptr<dist::ProcessGroup> world(const std::string& backend, std::shared_ptr<dist::Store> store, int rank = 0,
                                          int size = 1) {
  dist::ProcessGroupOptions o = mt::testing::test_group_options();
  o.backend = backend;
  o.timeout = std::chrono::seconds(60);
  return dist::create_process_group(std::move(store), rank, size, o);
}

mintrain::RunConfig run_config(const std::string& dist_text) {
  mintrain::RunConfig run;
  const bool parsed = google::protobuf::TextFormat::ParseFromString("dist { " + dist_text + " }", &run);
  EXPECT_TRUE(parsed) << "test config does not parse: " << dist_text;
  return run;
}

struct Trained {
  std::vector<std::vector<float>> weights;
  double average = 0;  // the job's metric average of 2.5
  bool stopped = false;  // the stop vote after a local request
};

// `kSteps` steps of the tiny MLP with `dist_text`'s algorithm on `group`, on `device`, then the
// evaluation hand-over; the weights. The synchronizer is gone on return (the parameter server's
// worker 0 has told the servers to stop).
std::vector<std::vector<float>> run_steps(std::shared_ptr<dist::ProcessGroup> group, const std::string& dist_text,
                                          Device device,
                                          std::shared_ptr<dist::ProcessGroup> world_with_servers = nullptr) {
  auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
  model->to(device);
  auto optimizer = mt::testing::reference_sgd(*model);
  auto sync = dist::make_synchronizer(group, run_config(dist_text), "the same config", nullptr, nullptr,
                                      std::move(world_with_servers));
  sync->setup(*model, *optimizer);
  for (int s = 0; s < kSteps; ++s) {
    sync->begin_iteration(s);
    auto [x, y] = mt::testing::synthetic_batch(s, kRows, kImage, kClasses);
    core::cross_entropy(model->forward(x.to(device)), y.to(device)).backward();
    mt::testing::step(*sync, *optimizer);
    optimizer->zero_grad();
  }
  sync->prepare_eval(*model);
  std::vector<std::vector<float>> weights;
  for (const auto& p : model->parameters()) {
    EXPECT_EQ(p.device(), device) << "a parameter left the training device";
    weights.push_back(p.to_vector());
  }
  return weights;
}

// run_steps over a world of one of `backend`, then the job's metric average and stop vote.
Trained train(const std::string& dist_text, Device device, const std::string& backend) {
  Trained out;
  auto store = local_store();
  auto group = world(backend, store);
  EXPECT_EQ(group->device(), device) << "the " << backend << " group takes its tensors elsewhere";
  out.weights = run_steps(group, dist_text, device);
  dist::Job job(group);
  out.average = job.average(2.5);
  // The vote is counted at the next one (job.h): the first says "go on", the second "stop".
  EXPECT_FALSE(job.stop_vote(true));
  out.stopped = job.stop_vote(false);
  job.drain_stop_vote();
  return out;
}

Trained train_ps_worker(Device device);

void expect_close(const Trained& gpu, const Trained& cpu, const std::string& what) {
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size()) << what;
  for (size_t p = 0; p < cpu.weights.size(); ++p) {
    const auto shape = std::vector<int64_t>{static_cast<int64_t>(cpu.weights[p].size())};
    EXPECT_TRUE(mt::testing::all_close(Tensor::from_vector(gpu.weights[p], shape),
                                       Tensor::from_vector(cpu.weights[p], shape), 1e-5, 1e-4))
        << what << ": parameter " << p << " after " << kSteps << " steps differs between GPU/NCCL and CPU/Gloo";
  }
  EXPECT_DOUBLE_EQ(gpu.average, 2.5) << what << ": the job's metric average over NCCL";
  EXPECT_TRUE(gpu.stopped) << what << ": the stop vote over NCCL lost the request";
  EXPECT_TRUE(cpu.stopped) << what;
}

// Each algorithm and option that changes which collectives run.
const std::vector<std::pair<std::string, std::string>> kAlgorithms = {
    {"ssgd bsp", R"(algorithm: "ssgd" ssgd { schedule: "bsp" })"},
    {"ssgd wfbp", R"(algorithm: "ssgd" ssgd { schedule: "wfbp" })"},
    {"ssgd fusion", R"(algorithm: "ssgd" ssgd { schedule: "fusion" bucket_cap_mb: 0.0006 first_bucket_cap_mb: 0.0001 })"},
    {"ssgd mgwfbp", R"(algorithm: "ssgd" ssgd { schedule: "mgwfbp" profile_iters: 1 alpha: 1e-5 beta: 1e-9 })"},
    {"ssgd hierarchical", R"(algorithm: "ssgd" ssgd { schedule: "fusion" allreduce: "hierarchical" ranks_per_rack: 1 })"},
    {"ssgd fp16 compression", R"(algorithm: "ssgd" compressor { type: "fp16" })"},
    {"cdsgd", R"(algorithm: "cdsgd" cdsgd { warmup_iters: 1 k: 0 } compressor { type: "two_bit" })"},
    {"dssync", R"(algorithm: "dssync" dssync { group_size: 2 global_average_every: 1 })"},
    {"local_sgd", R"(algorithm: "local_sgd" local_sgd { period: 1 })"},
};

// The CPU half alone, on every machine: the reference runs (worlds of one over Gloo, each
// algorithm's set-up and steps, the parameter-server thread) work and train, so a GPU run that
// fails points at the device path, not at this harness.
TEST(NcclAlgorithms, TheCpuReferenceRunsEveryAlgorithmOnAGlooWorldOfOne) {
  auto initial = mt::testing::weights_of(*mt::testing::tiny_mlp(7, kImage, kClasses));
  for (const auto& [name, text] : kAlgorithms) {
    SCOPED_TRACE(name);
    const Trained cpu = train(text, Device::cpu(), "gloo");
    EXPECT_NE(cpu.weights, initial) << name << " did not train";
    EXPECT_DOUBLE_EQ(cpu.average, 2.5);
    EXPECT_TRUE(cpu.stopped) << name << ": the stop vote lost the request";
  }
  EXPECT_NE(train_ps_worker(Device::cpu()).weights, initial) << "ps did not train";
}

TEST(NcclAlgorithms, EveryAlgorithmOnOneGpuMatchesTheCpu) {
  MT_REQUIRE_GPU();
  core::select_device(Device::cuda(0));
  for (const auto& [name, text] : kAlgorithms) {
    SCOPED_TRACE(name);
    Trained gpu, cpu;
    try {
      gpu = train(text, Device::cuda(0), "nccl");
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " on CUDA over NCCL failed: " << e.what();
      continue;
    }
    cpu = train(text, Device::cpu(), "gloo");
    expect_close(gpu, cpu, name);
  }
}

// Several communicators of one rank on one GPU: subgroups (DS-Sync's groups, the job's vote)
// are communicators of their own, each on its own stream, and host values sent through the
// set-up helpers are staged on the group's GPU.
TEST(NcclAlgorithms, SubgroupsAndSetUpHelpersOnOneGpu) {
  MT_REQUIRE_GPU();
  core::select_device(Device::cuda(0));
  auto store = local_store();
  auto group = world("nccl", store);
  auto again = group->subgroup({0});
  auto third = again->subgroup({0});
  EXPECT_EQ(again->device(), Device::cuda(0));
  for (const auto& g : {group, again, third}) {
    Tensor t = Tensor::full({5}, 3.0, core::DType::Float32, Device::cuda(0));
    dist::finish(g->allreduce(t), *g, "allreduce on " + g->describe());
    EXPECT_EQ(t.to_vector(), std::vector<float>(5, 3.0f)) << g->describe();
  }
  // A high float32 part and its remainder: about 48 bits of the double (the H200 run gave 2.7e-16 off).
  EXPECT_NEAR(dist::mean_over_ranks(*third, 1.0 / 3.0), 1.0 / 3.0, 1e-14) << "the metric average";
  auto model = mt::testing::tiny_mlp(3, kImage, kClasses);  // stays on the CPU: staged through the GPU
  const auto before = mt::testing::weights_of(*model);
  dist::check_replicas_agree(*group, *model, "config");
  dist::broadcast_parameters(*group, *model);
  EXPECT_EQ(mt::testing::weights_of(*model), before);
  core::StateDict mine = {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})}};
  const auto states = dist::gather_states_to_rank0(*group, mine, "test state");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0][0].second.to_vector(), (std::vector<float>{1, 2, 3}));
}

// Bad input: a host tensor given straight to an NCCL collective is refused with an Error naming
// the backend and what to do, not a crash inside NCCL.
TEST(NcclAlgorithms, HostTensorOnNcclIsRefusedWithAClearError) {
  MT_REQUIRE_GPU();
  core::select_device(Device::cuda(0));
  auto store = local_store();
  auto group = world("nccl", store);
  Tensor host = Tensor::ones({4});
  try {
    group->allreduce(host)->wait();
    FAIL() << "an allreduce of a CPU tensor on NCCL was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the nccl backend takes CUDA tensors"), std::string::npos) << e.what();
  }
}

// The parameter server with a GPU worker: the worker's gradients leave the device for the Gloo
// wire and the sums come back to it. The worker is this process (rank 0); the server (rank 1)
// is a forked child that never touches CUDA (a child may not use the parent's CUDA), and hosts
// the store. With one worker the server's sum is the worker's gradient: the weights equal the
// same run on the CPU.
Trained train_ps_worker(Device device) {
  Trained out;
  const int port = mt::testing::free_port();
  const pid_t server = fork();
  if (server == 0) {
    int code = 0;
    try {
      dist::TCPStoreOptions so;
      so.port = port;
      so.is_server = true;
      so.rank = 1;
      so.timeout = std::chrono::seconds(60);
      dist::PsServerOptions o;
      o.workers = 1;
      o.servers = 1;
      o.partition_bytes = 64;
      dist::ParameterServer(world("gloo", std::make_shared<dist::TCPStore>(so), 1, 2), o).run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "parameter server: %s\n", e.what());
      code = 1;
    }
    std::_Exit(code);
  }
  try {
    dist::TCPStoreOptions so;
    so.port = port;
    so.rank = 0;
    so.timeout = std::chrono::seconds(60);
    auto full = world("gloo", std::make_shared<dist::TCPStore>(so), 0, 2);
    out.weights = run_steps(full->subgroup({0}), R"(algorithm: "ps" ps { schedule: "wfbp" partition_bytes: 64 })",
                            device, full);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "parameter-server worker on " << device.str() << ": " << e.what();
  }
  // The server stops when told, or at its own timeouts when the worker failed: bounded either way.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (waitpid(server, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(server, SIGKILL);
      waitpid(server, &status, 0);
      ADD_FAILURE() << "the parameter server did not stop; killed";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the parameter server failed (its stderr says why)";
  out.average = 2.5;
  out.stopped = true;
  return out;
}

TEST(NcclAlgorithms, ParameterServerWithAGpuWorkerMatchesTheCpu) {
  MT_REQUIRE_GPU();
  core::select_device(Device::cuda(0));
  expect_close(train_ps_worker(Device::cuda(0)), train_ps_worker(Device::cpu()), "ps wfbp");
}

}  // namespace
}  // namespace mt
