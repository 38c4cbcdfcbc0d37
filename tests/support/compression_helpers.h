// Helpers the compressor tests share (tests/test_compressors.cpp on the CPU and
// tests/test_compressors_gpu.cpp against it): seeded random gradients and compressor options.
#pragma once
#include <cstdint>
#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "dist/compress/compressor.h"

namespace mt::testing {

// n values uniform in [-scale, scale), on the CPU, the same for the same seed.
inline core::Tensor random_vector(int64_t n, uint64_t seed, float scale = 1.0f) {
  core::Generator gen(seed);
  core::Tensor t = core::Tensor::empty({n});
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = (gen.uniform() * 2.0f - 1.0f) * scale;
  return t;
}

// `ratio` is read by TOPK only.
inline dist::CompressionOptions compression_options(const std::string& type, double tau = 0.5,
                                                    double ratio = 0.1) {
  dist::CompressionOptions o;
  o.type = type;
  o.tau = tau;
  o.topk_ratio = ratio;
  return o;
}

}  // namespace mt::testing
