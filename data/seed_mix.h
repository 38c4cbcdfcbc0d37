// Seed mixing: turns (seed, epoch, index) into an independent Philox key.
//
// Philox streams with different keys are independent, so giving every example its own key makes
// its random augmentation a pure function of (seed, epoch, dataset index): the same no matter how
// many threads fill a batch, in which order, or where an epoch was resumed.
#pragma once
#include <cstdint>

namespace mt::data {

// SplitMix64's finalizer: a bijection on 64 bits with good avalanche, so nearby inputs
// (index 7 and 8) give unrelated outputs.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Order matters (mix_seed(a, b) != mix_seed(b, a)), which keeps (epoch 1, index 2) and
// (epoch 2, index 1) apart.
inline uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ b); }

}  // namespace mt::data
