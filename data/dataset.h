// Datasets of labelled images: held in memory as uint8 (Fashion-MNIST and CIFAR-10 fit easily),
// or decoded from files on demand (image folders and lists, data/image_dataset.h).
// get() writes one example as C*H*W floats scaled to [0, 1]; transforms and normalization run
// afterwards in the loader.
//
// Datasets whose examples vary in size (image files) must produce a fixed [C, H, W], so they do
// their geometric augmentation (random resized crop, resize + center crop) and color jitter
// inside get(), on the decoded pixels, before the conversion to floats: that is where it is
// cheap (uint8, one resize of just the crop) and where the source size is known. They draw from
// the per-example Generator the loader passes to get_augmented(); the loader's
// Transform then continues with the same Generator (flip, normalization).
#pragma once
#include <cstdint>
#include <string>

#include "core/random.h"
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
  // What the loader calls: get() for datasets with random augmentation of their own. `gen` is
  // example `index`'s stream for this epoch (see data/seed_mix.h). By default it is get(), and
  // the Generator reaches the loader's Transform untouched. (A name of its own rather than an
  // overload of get(), so datasets that override only get() do not hide it.)
  virtual int64_t get_augmented(int64_t index, float* dst, core::Generator& gen) const {
    return get(index, dst);
  }
};

}  // namespace mt::data
