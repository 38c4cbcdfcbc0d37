#include "core/kernels/cpu/dropout.h"

#include <algorithm>

#include "core/kernels/cpu/vector_clones.h"
#include "core/philox.h"

namespace mt::core::cpu {

namespace {
// Philox blocks are drawn kGroup at a time: one loop computes the group's blocks, independent of
// each other, so that their multiply-xor rounds vectorize across blocks; the next applies their
// words. Value 4 b + j of the tensor takes word j of block counter + b, as on the GPU.
constexpr int64_t kGroup = 16;
}  // namespace

MT_VECTOR_CLONES void dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t counter,
                                      Tensor& y, Tensor& mask) {
  const float* px = x.data<float>();
  float* py = y.data<float>();
  uint8_t* pm = mask.data<uint8_t>();
  const int64_t n = x.numel(), per_group = 4 * kGroup, groups = (n + per_group - 1) / per_group;
  // Each thread its own p and scale (firstprivate): a store into the mask's bytes could alias
  // shared ones as far as the compiler knows, which would keep it from vectorizing.
#pragma omp parallel for schedule(static) if (n > (1 << 14)) firstprivate(p, scale)
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t words[4 * kGroup];
    for (int64_t b = 0; b < kGroup; ++b) {
      const PhiloxBlock r = philox_block(seed, counter + static_cast<uint64_t>(g * kGroup + b));
      for (int64_t j = 0; j < 4; ++j) words[4 * b + j] = r.w[j];
    }
    const int64_t first = g * per_group, count = std::min(per_group, n - first);
    uint8_t* keep = pm + first;
    for (int64_t e = 0; e < count; ++e) keep[e] = u32_to_unit(words[e]) >= p;
    for (int64_t e = 0; e < count; ++e) py[first + e] = keep[e] ? px[first + e] * scale : 0.0f;
  }
}

void dropout_backward(const Tensor& gy, const Tensor& mask, float scale, Tensor& gx) {
  const float* pg = gy.data<float>();
  const uint8_t* pm = mask.data<uint8_t>();
  float* po = gx.data<float>();
  const int64_t n = gy.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) po[i] = pm[i] ? pg[i] * scale : 0.0f;
}

}  // namespace mt::core::cpu
