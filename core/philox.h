// Philox4x32-10 (Salmon et al. 2011) as plain functions on words, callable from host and device
// code: the CPU generator (random.h) and the CUDA dropout kernel both draw through these, so a
// mask computed on either device is the same bit for bit.
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace mt::core {

struct PhiloxBlock {
  uint32_t w[4];
};

MT_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                                uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57, kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c0, p1 = uint64_t(kM1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Block `index` of the stream keyed by `seed` (what Generator::block returns).
MT_HOST_DEVICE inline PhiloxBlock philox_block(uint64_t seed, uint64_t index) {
  return philox4x32_10(uint32_t(index), uint32_t(index >> 32), 0, 0, uint32_t(seed), uint32_t(seed >> 32));
}

// Converts 32 random bits to a float in [0, 1) with 24 bits of precision.
MT_HOST_DEVICE inline float u32_to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace mt::core
