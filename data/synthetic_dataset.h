// Synthetic labelled images for tests and benchmarks, with no files to download.
//
// Each class has a fixed random prototype image; an example is a blend of its class prototype
// and per-pixel noise, so the label is learnable (a linear model separates the classes) but not
// trivially (single pixels are noisy). Everything is a pure function of the seed: prototypes
// from (seed), example i from (seed, split, i), so get() needs no state and is thread-safe, and
// a train and a test split of the same seed share prototypes but not examples.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mt::data {

class SyntheticDataset final : public Dataset {
 public:
  // `split` distinguishes train (0) from test (1) examples; any value works.
  SyntheticDataset(int64_t size, Shape image_shape, int64_t num_classes, uint64_t seed,
                   uint64_t split = 0);

  int64_t size() const override { return size_; }
  Shape image_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;
  int64_t get(int64_t index, float* dst) const override;

  // Weight of the prototype in an example; the rest is uniform noise.
  static constexpr float kSignal = 0.5f;

 private:
  int64_t size_;
  Shape shape_;
  int64_t num_classes_;
  uint64_t seed_;
  uint64_t split_;
  int64_t numel_;
  std::vector<float> prototypes_;  // [num_classes, C*H*W] in [0, 1)
};

}  // namespace mt::data
