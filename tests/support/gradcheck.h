// Finite-difference gradient checking, the test every differentiable op must pass.
//
// The function's output is projected onto fixed random weights, loss = sum(f(x) * r), so every
// output element matters. For each input element we compare d loss / d x from backward() with
// the central difference (loss(x + eps) - loss(x - eps)) / (2 eps), computed in double from
// float32 outputs.
#pragma once
#include <cstdlib>
#include <string>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "core/tensor.h"

namespace mt::testing {

using core::Tensor;
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-3;
  double atol = 2e-3;
  double rtol = 2e-2;
  uint64_t seed = 1234;
};

// Inputs are used as given; the ones that are float32 get requires_grad and are checked.
::testing::AssertionResult gradcheck(const OpFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& opt = {});

// A float tensor with values uniform in [low, high) from a fixed seed.
Tensor random_tensor(const core::Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f);

// Element-wise closeness of two float tensors (any devices); names the worst element.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol = 1e-5,
                                     double rtol = 1e-4);

}  // namespace mt::testing

// For GPU tests: skips, visibly and with the reason (no GPU, or a GPU that cannot be used, in
// CUDA's words), when no CUDA device can be used. With MT_STRICT_GPU=1 in the environment (set
// by apps/scripts/gpu_check.sh on a GPU machine) it fails instead: a GPU run that tested nothing
// must not come out green.
namespace mt::testing {
inline bool strict_gpu() {
  const char* v = std::getenv("MT_STRICT_GPU");
  return v != nullptr && std::string(v) == "1";
}
}  // namespace mt::testing
#ifdef MT_CUDA_KERNELS
#define MT_REQUIRE_GPU()                                                                              \
  do {                                                                                                \
    if (!::mt::core::cuda_available()) {                                                              \
      if (::mt::testing::strict_gpu())                                                                \
        FAIL() << "MT_STRICT_GPU=1 but " << ::mt::core::cuda_unavailable_reason();                    \
      GTEST_SKIP() << ::mt::core::cuda_unavailable_reason() << ": GPU test not run";                  \
    }                                                                                                 \
  } while (0)
#else
#define MT_REQUIRE_GPU()                                                                              \
  do {                                                                                                \
    if (::mt::testing::strict_gpu()) FAIL() << "MT_STRICT_GPU=1 but this build has no CUDA kernels"; \
    GTEST_SKIP() << "this build has no CUDA op kernels: GPU test not run";                            \
  } while (0)
#endif
