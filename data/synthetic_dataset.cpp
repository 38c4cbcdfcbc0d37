#include "data/synthetic_dataset.h"

#include "core/error.h"
#include "core/random.h"
#include "data/seed_mix.h"

namespace mt::data {

namespace {
// Distinct stream tags, so prototypes and examples never share a Philox key.
constexpr uint64_t kPrototypeStream = 0x70726f746full;  // "proto"
constexpr uint64_t kExampleStream = 0x6578616d70ull;    // "examp"
}  // namespace

SyntheticDataset::SyntheticDataset(int64_t size, Shape image_shape, int64_t num_classes,
                                   uint64_t seed, uint64_t split)
    : size_(size), shape_(std::move(image_shape)), num_classes_(num_classes), seed_(seed),
      split_(split) {
  MT_CHECK(size_ >= 0, "synthetic dataset: size must be >= 0, got ", size_,
           "; set data.synthetic_size");
  MT_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] > 0 && shape_[2] > 0,
           "synthetic dataset: image shape must be [C, H, W] with positive sizes, got ",
           core::shape_str(shape_), "; set data.synthetic_shape");
  MT_CHECK(num_classes_ >= 1, "synthetic dataset: num_classes must be >= 1, got ", num_classes_,
           "; set data.synthetic_classes");
  numel_ = core::shape_numel(shape_);
  core::Generator gen(mix_seed(seed_, kPrototypeStream));
  prototypes_.resize(static_cast<size_t>(num_classes_ * numel_));
  for (float& v : prototypes_) v = gen.uniform();
}

std::string SyntheticDataset::describe() const {
  return core::detail::concat("synthetic split ", split_, " (", size_, " images ",
                              core::shape_str(shape_), ", ", num_classes_, " classes, seed ", seed_,
                              ")");
}

int64_t SyntheticDataset::get(int64_t index, float* dst) const {
  MT_CHECK(index >= 0 && index < size_, "synthetic dataset: index ", index, " out of range [0, ",
           size_, ")");
  core::Generator gen(mix_seed(mix_seed(mix_seed(seed_, kExampleStream), split_), uint64_t(index)));
  const int64_t label = static_cast<int64_t>(gen.below(uint64_t(num_classes_)));
  const float* proto = prototypes_.data() + label * numel_;
  for (int64_t i = 0; i < numel_; ++i)
    dst[i] = kSignal * proto[i] + (1.0f - kSignal) * gen.uniform();
  return label;
}

}  // namespace mt::data
