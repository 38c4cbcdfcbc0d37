#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/random.h"

namespace mt::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : size_(dataset_size), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed) {
  MT_CHECK(dataset_size >= 0, "sampler: dataset size must be >= 0, got ", dataset_size);
  MT_CHECK(world_size >= 1, "sampler: world_size must be >= 1, got ", world_size);
  MT_CHECK(rank >= 0 && rank < world_size, "sampler: rank ", rank, " is outside [0, ", world_size,
           ")");
  per_rank_ = drop_last ? size_ / world_size_ : (size_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::epoch_indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (shuffle_) {
    core::Generator gen(seed_ + static_cast<uint64_t>(epoch));
    order = core::randperm(size_, gen);
  } else {
    order.resize(size_);
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<int64_t> mine;
  mine.reserve(per_rank_);
  // Position p of the padded (or cut) order is order[p mod N]: wrapping handles padding, and
  // with drop_last no position reaches N.
  for (int64_t i = 0; i < per_rank_; ++i) {
    const int64_t pos = rank_ + i * world_size_;
    mine.push_back(order[pos % size_]);
  }
  return mine;
}

}  // namespace mt::data
