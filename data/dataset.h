// Datasets of labelled images held in memory as uint8 (Fashion-MNIST and CIFAR-10 fit easily).
// get() writes one example as C*H*W floats scaled to [0, 1]; transforms and normalization run
// afterwards in the loader.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace mt::data {

using core::Shape;
using core::Tensor;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape image_shape() const = 0;  // [C, H, W]
  virtual int64_t num_classes() const = 0;
  virtual std::string describe() const = 0;  // "fashion-mnist train (60000 images) from <path>"
  // Writes example `index` (C*H*W floats in [0, 1]) to dst and returns its label.
  virtual int64_t get(int64_t index, float* dst) const = 0;
};

}  // namespace mt::data
