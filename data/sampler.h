// Which dataset indices each rank reads in an epoch, following PyTorch's DistributedSampler.
//
// Every rank computes the same epoch order (a permutation drawn from Generator(seed + epoch),
// or 0..N-1 without shuffle), so no communication is needed; rank r then takes positions
// r, r + world_size, r + 2 world_size, ... Ranks must see the same number of examples, or the
// ranks that run out first would stop joining the gradient all-reduce and the others would hang:
// without drop_last the order is padded by wrapping around to its start (a few examples are
// seen twice); with drop_last the tail is cut instead (a few are not seen this epoch).
#pragma once
#include <cstdint>
#include <vector>

namespace mt::data {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, bool shuffle, uint64_t seed,
                     bool drop_last);

  // This rank's dataset indices for `epoch`, per_rank() of them.
  std::vector<int64_t> epoch_indices(int64_t epoch) const;
  int64_t per_rank() const { return per_rank_; }

 private:
  int64_t size_;
  int rank_;
  int world_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t per_rank_;
};

}  // namespace mt::data
