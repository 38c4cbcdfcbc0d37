#include "core/kernels/cpu/dropout.h"

#include "core/random.h"

namespace mt::core::cpu {

void dropout_forward(const Tensor& x, float p, float scale, uint64_t seed, uint64_t counter,
                     Tensor& y, Tensor& mask) {
  const Generator gen(seed);  // only its seed is used: block() is a pure function of the counter
  const float* px = x.data<float>();
  float* py = y.data<float>();
  uint8_t* pm = mask.data<uint8_t>();
  const int64_t n = x.numel(), blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > (1 << 14))
  for (int64_t b = 0; b < blocks; ++b) {
    const auto r = gen.block(counter + static_cast<uint64_t>(b));
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i >= n) break;
      const bool keep = u32_to_unit(r[j]) >= p;
      pm[i] = keep;
      py[i] = keep ? px[i] * scale : 0.0f;
    }
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
