// The device seam: device parsing, kernels chosen by device, and host<->device copies. The GPU
// parts skip themselves (visibly) where no CUDA device exists.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <string>

#include "core/device_marks.h"
#include "core/op_profile.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/synchronize.h"
#include "core/random.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "support/gradcheck.h"

#ifdef MT_WITH_CUDA
#include "core/cuda/cuda_memory.h"
#endif

using namespace mt::core;

TEST(Device, Parse) {
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_EQ(Device::parse("cuda").index, 0);
  EXPECT_EQ(Device::parse("cuda:3").index, 3);
  EXPECT_EQ(Device::parse("cuda:1").str(), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", ""}) {
    try {
      Device::parse(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("valid devices"), std::string::npos);
    }
  }
}

TEST(Device, CpuOnlyBuildRefusesCudaClearly) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  Tensor t = Tensor::ones({4});
#ifndef MT_WITH_CUDA
  EXPECT_THROW(t.to(Device::cuda()), Error);
#else
  EXPECT_THROW(t.to(Device::cuda()), Error);  // built with CUDA, but no device / driver here
#endif
}

// Device binding by the torchrun convention (no GPU needed: the visible count is given).
TEST(DeviceBinding, CudaMeansThisRanksOwnGpu) {
  EXPECT_EQ(resolve_device("cuda", 3, 8), Device::cuda(3));
  EXPECT_EQ(resolve_device("cuda", 0, 1), Device::cuda(0));
  EXPECT_EQ(resolve_device("cuda", -1, 0), Device::cuda(0));  // not under a launcher
  EXPECT_EQ(resolve_device("cuda:2", 5, 8), Device::cuda(2));  // an explicit index is taken as written
  EXPECT_EQ(resolve_device("cpu", 3, 0), Device::cpu());
  try {
    resolve_device("cuda", 4, 2);
    FAIL() << "5 local ranks on 2 visible GPUs";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("local rank 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 are visible"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << msg;
  }
}

// Sets (or clears, with nullptr) an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_.empty() ? ::unsetenv(name_) : ::setenv(name_, old_.c_str(), 1); }
  const char* name_;
  std::string old_;
};

TEST(DeviceBinding, TheLocalRankComesFromTheLauncherSlurmOrOpenMpi) {
  ScopedEnv a("LOCAL_RANK", nullptr), b("SLURM_LOCALID", nullptr), c("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  EXPECT_EQ(local_rank_from_env(), -1);
  {
    ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "5");
    EXPECT_EQ(local_rank_from_env(), 5);
    ScopedEnv slurm("SLURM_LOCALID", "2");
    EXPECT_EQ(local_rank_from_env(), 2);  // Slurm before Open MPI
    ScopedEnv torchrun("LOCAL_RANK", "1");
    EXPECT_EQ(local_rank_from_env(), 1);  // the launcher's own first
  }
  ScopedEnv bad("LOCAL_RANK", "one");
  EXPECT_THROW(local_rank_from_env(), Error);
}

TEST(DeviceBinding, NoGpuIsToldApartFromAGpuThatCannotBeUsed) {
  const std::string reason = cuda_unavailable_reason();
  if (cuda_available()) {
    EXPECT_EQ(reason, "");
    return;
  }
  // On the CPU machines: no driver at all, or no device, or a CPU-only build; each says so.
  EXPECT_FALSE(reason.empty());
  const bool no_gpu = reason.find("no NVIDIA driver") != std::string::npos ||
                      reason.find("no CUDA device") != std::string::npos ||
                      reason.find("no CUDA support") != std::string::npos;
  const bool unusable = reason.find("present but cannot be used") != std::string::npos;
  EXPECT_TRUE(no_gpu != unusable) << reason;
}

// MG-WFBP's per-layer backward times come from these marks (on a GPU, CUDA events).
TEST(DeviceMarks, IntervalsBetweenConsecutiveMarksOnTheCpu) {
  DeviceMarks marks(Device::cpu());
  EXPECT_TRUE(marks.intervals().empty());
  marks.mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  marks.mark();
  marks.mark();
  const std::vector<double> between = marks.intervals();
  ASSERT_EQ(between.size(), 2u);
  EXPECT_GE(between[0], 0.019);
  EXPECT_LT(between[0], 1.0);
  EXPECT_GE(between[1], 0.0);
  EXPECT_LT(between[1], between[0]);
  marks.clear();
  EXPECT_EQ(marks.size(), 0u);
}

TEST(DeviceMarksGpu, EventsTimeTheQueueNotTheLaunches) {
  MT_REQUIRE_GPU();
  DeviceMarks marks(Device::cuda());
  Generator gen(3);
  Tensor x = rand_uniform({1024, 1024}, -1, 1, gen).to(Device::cuda());
  marks.mark();
  for (int i = 0; i < 20; ++i) x = mul(x, x);  // queued work between the marks
  marks.mark();
  const std::vector<double> between = marks.intervals();
  ASSERT_EQ(between.size(), 1u);
  EXPECT_GT(between[0], 0.0);
}

// The per-op profile given the GPU waits for the kernels a scope queued, so its times add up to
// the kernels' time; without waiting they would be the launches', a few microseconds each.
TEST(OpProfileGpu, ScopesGivenTheGpuTimeTheirKernels) {
  MT_REQUIRE_GPU();
  Generator gen(5);
  const Tensor x = rand_uniform({2048, 2048}, -1, 1, gen).to(Device::cuda());
  Tensor y = matmul(x, x);  // cuBLAS's set-up out of the way
  synchronize(Device::cuda());
  DeviceMarks marks(Device::cuda());
  marks.mark();
  for (int i = 0; i < 10; ++i) y = matmul(x, x);
  marks.mark();
  const double kernels = marks.intervals().at(0);

  reset_op_profile();
  set_op_profiling(true, Device::cuda());
  {
    ProfileScope scope("ten matmuls");
    for (int i = 0; i < 10; ++i) y = matmul(x, x);
  }
  set_op_profiling(false);
  double profiled = 0.0;
  for (const auto& e : op_profile()) profiled += e.seconds;
  EXPECT_GT(profiled, 0.8 * kernels) << "the profile timed the launches, not the kernels";
}

TEST(DeviceGpu, RoundTripAndAllocatorReuse) {
  MT_REQUIRE_GPU();
#ifdef MT_WITH_CUDA
  Generator gen(7);
  Tensor x = rand_uniform({3, 5, 7}, -1, 1, gen);
  Tensor g = x.to(Device::cuda());
  EXPECT_TRUE(g.is_cuda());
  EXPECT_TRUE(mt::testing::all_close(g.to(Device::cpu()), x, 0, 0));
  size_t before = cuda::allocator_stats().device_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor t = x.to(Device::cuda());  // same size each time: served from the cache
  }
  EXPECT_LE(cuda::allocator_stats().device_allocations, before + 1);
#endif
}

// The loader on a GPU (data/device_staging.h): batches copied on the loader threads'
// non-blocking streams, with the compute stream told to wait, hold the CPU loader's values;
// the batch memory, allocated for the copy streams and recorded as used by the compute stream,
// comes back to the pool once the kernels that read it are done (the device allocations stop
// growing after the first batches), while batches still held are never handed out again.
TEST(DataLoaderGpu, UploadedBatchesEqualTheCpuLoadersAndTheirMemoryIsReused) {
  MT_REQUIRE_GPU();
#ifdef MT_WITH_CUDA
  auto dataset = std::make_shared<mt::data::SyntheticDataset>(600, Shape{3, 16, 16}, 10, 5);
  mt::data::LoaderOptions o;
  o.batch_size = 20;
  o.threads = 2;
  o.prefetch_batches = 3;
  mt::data::DataLoader cpu(dataset, mt::data::Transform(), o);
  o.device = Device::cuda();
  mt::data::DataLoader gpu(dataset, mt::data::Transform(), o);
  size_t allocations_after_first_epoch = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    cpu.start_epoch(epoch);
    gpu.start_epoch(epoch);
    // A few batches kept alive (with the CPU loader's values) while later batches upload.
    std::vector<std::pair<mt::data::Batch, Tensor>> held;
    mt::data::Batch a, b;
    while (gpu.next(b)) {
      ASSERT_TRUE(cpu.next(a));
      ASSERT_TRUE(b.inputs.is_cuda() && b.targets.is_cuda());
      ASSERT_TRUE(b.uploaded != nullptr) << "no upload event travels with the batch";
      // A kernel on the compute stream reads the batch before it is compared and freed.
      const Tensor doubled = mul(b.inputs, 2.0f);
      EXPECT_TRUE(mt::testing::all_close(doubled.to(Device::cpu()), mul(a.inputs, 2.0f), 0, 0))
          << "epoch " << epoch << " batch " << b.index;
      EXPECT_EQ(b.targets.to(Device::cpu()).to_vector(), a.targets.to_vector());
      if (b.index % 7 == 0) held.emplace_back(b, a.inputs.clone());
    }
    EXPECT_FALSE(cpu.next(a));
    for (const auto& [batch, expected] : held)  // intact: their blocks went to no later batch
      EXPECT_TRUE(mt::testing::all_close(batch.inputs.to(Device::cpu()), expected, 0, 0)) << "batch " << batch.index;
    if (epoch == 0) allocations_after_first_epoch = cuda::allocator_stats().device_allocations;
  }
  EXPECT_LE(cuda::allocator_stats().device_allocations, allocations_after_first_epoch + 2)
      << "batch blocks are not coming back to the pool";
#endif
}
