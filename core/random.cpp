#include "core/random.h"

#include <cmath>
#include <numeric>

namespace mt::core {

// philox.h's block: the one definition the CUDA kernels use too.
std::array<uint32_t, 4> Generator::block(uint64_t index) const {
  const PhiloxBlock b = philox_block(seed_, index);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint32_t Generator::next_u32() {
  if (buf_left_ == 0) {
    buf_ = block(reserve(1));
    buf_left_ = 4;
  }
  return buf_[4 - buf_left_--];
}

float Generator::uniform() { return u32_to_unit(next_u32()); }

uint64_t Generator::next_u64() {
  const uint64_t high = next_u32();  // the first draw: `a | b` would leave the order unspecified
  return (high << 32) | next_u32();
}

uint64_t Generator::below(uint64_t n) {
  // Rejection sampling on 64 bits: no modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = next_u64();
    if (x < limit) return x % n;
  }
}

Tensor rand_uniform(const Shape& shape, float low, float high, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  const uint64_t base = gen.reserve((n + 3) / 4);
  for (int64_t i = 0; i < n; i += 4) {
    auto r = gen.block(base + i / 4);
    for (int64_t j = 0; j < 4 && i + j < n; ++j) p[i + j] = low + (high - low) * u32_to_unit(r[j]);
  }
  return t;
}

Tensor randn(const Shape& shape, float mean, float stddev, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  const uint64_t base = gen.reserve((n + 1) / 2);
  // Box-Muller: one block (4 words) gives two normals.
  for (int64_t i = 0; i < n; i += 2) {
    auto r = gen.block(base + i / 2);
    const float u1 = (static_cast<float>(r[0] >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
    const float u2 = u32_to_unit(r[1]);
    const float rad = std::sqrt(-2.0f * std::log(u1)), th = 6.2831853071795864f * u2;
    p[i] = mean + stddev * rad * std::cos(th);
    if (i + 1 < n) p[i + 1] = mean + stddev * rad * std::sin(th);
  }
  return t;
}

std::vector<int64_t> randperm(int64_t n, Generator& gen) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[gen.below(i + 1)]);
  return p;
}

}  // namespace mt::core
