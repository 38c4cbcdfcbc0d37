// Per-example augmentation and normalization, applied in place to one C*H*W image by the loader.
//
// Order: random crop (pad with zeros by `random_crop_padding` on every side, then cut an HxW
// window at a random offset; equivalent to shifting the image by up to +-padding pixels),
// horizontal flip with probability 0.5, then normalization (x - mean[c]) / std[c].
// Randomness comes only from the Generator passed to apply(), so the loader controls it.
#pragma once
#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace mt::data {

struct TransformOptions {
  std::vector<float> mean;  // empty (0), one value for all channels, or one per channel
  std::vector<float> std;   // empty (1), one value for all channels, or one per channel
  int64_t random_crop_padding = 0;
  bool random_flip = false;
};

class Transform {
 public:
  Transform() = default;  // identity
  Transform(TransformOptions opt, core::Shape image_shape);

  // In place on C*H*W floats. Draws from `gen` only for the random steps that are enabled.
  void apply(float* chw, core::Generator& gen) const;
  // True when apply() changes nothing (the loader then skips it).
  bool identity() const;
  // The [C, H, W] the transform was built for (empty for the default identity).
  const core::Shape& image_shape() const { return shape_; }

 private:
  TransformOptions opt_;
  core::Shape shape_;
  std::vector<float> mean_;     // per channel, after broadcasting a single value
  std::vector<float> std_;      // per channel
  bool normalize_ = false;
};

}  // namespace mt::data
