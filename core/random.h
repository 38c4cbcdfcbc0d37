// Deterministic random numbers: Philox4x32-10, a counter-based generator (Salmon et al. 2011).
// Output i of seed s is a pure function of (s, i), so a run is reproducible from its seed, the
// state is two integers (easy to checkpoint), and a GPU kernel can draw element i without
// sharing state between threads.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace mt::core {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }  // number of 4-word blocks drawn so far
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }

  // Reserves `blocks` blocks of 4 words and returns the first block's counter, so that a
  // kernel can compute them independently (block i: philox(counter + i, key)).
  uint64_t reserve(uint64_t blocks) {
    uint64_t start = offset_;
    offset_ += blocks;
    return start;
  }
  std::array<uint32_t, 4> block(uint64_t index) const;

  uint32_t next_u32();
  // 64 bits from two next_u32(); also the seed of a layer's own generator, drawn from the
  // model's so that the model stays a function of one seed.
  uint64_t next_u64();
  float uniform();             // [0, 1)
  uint64_t below(uint64_t n);  // uniform integer in [0, n)

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::array<uint32_t, 4> buf_{};
  int buf_left_ = 0;
};

// u32_to_unit (32 random bits -> [0, 1)) lives in philox.h, shared with the CUDA kernels.

// Random tensors (CPU; move them afterwards). Each draws from `gen` and advances it.
Tensor rand_uniform(const Shape& shape, float low, float high, Generator& gen);
Tensor randn(const Shape& shape, float mean, float stddev, Generator& gen);
// A random permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> randperm(int64_t n, Generator& gen);

}  // namespace mt::core
