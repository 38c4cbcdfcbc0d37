// The device seam: device parsing, kernels chosen by device, and host<->device copies. The GPU
// parts skip themselves (visibly) where no CUDA device exists.
#include <gtest/gtest.h>

#include "core/ops/elementwise.h"
#include "core/random.h"
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

TEST(DeviceGpu, RoundTripAndAllocatorReuse) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: host<->device copies not run";
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
