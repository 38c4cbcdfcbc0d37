// The bookkeeping of a caching device allocator, apart from any device API so that it runs and
// is tested on the CPU (core/cuda/caching_allocator.cpp puts cudaMalloc behind it, one pool per
// GPU).
//
// Why cache at all: cudaMalloc and cudaFree synchronize the device, so a training loop that
// allocated its activations afresh every step would stall on every tensor. Memory comes from
// the backing allocator in segments; tensors get blocks carved out of them; a freed block stays
// in the pool for the next request:
//   - sizes are rounded to 512 bytes; requests up to 1 MiB share 2 MiB segments, larger ones get
//     a segment of their own size rounded to 2 MiB;
//   - a request takes the smallest free block that fits (best fit) and splits off the rest when
//     the rest is worth keeping (512 bytes in the small pool, 1 MiB in the large), so one large
//     cached block (a convolution's search workspace) can serve many smaller requests later;
//   - a freed block merges with free neighbours of its segment, undoing the splits;
//   - a block belongs to the stream it was allocated on and is reused by that stream only (work
//     queued on another stream may still read it); a tensor used on another stream is recorded
//     with record_stream, and its block returns to the pool only when that is done (the caller's
//     job: it frees the block once the other stream's work has completed);
//   - when the backing allocator has no memory, the pool gives its wholly free segments back
//     and tries once more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

namespace mt::core {

struct BlockPoolStats {
  size_t current_bytes = 0;       // in blocks handed out
  size_t peak_bytes = 0;          // the most ever handed out at once
  size_t cached_bytes = 0;        // in free blocks kept for reuse
  size_t device_allocations = 0;  // segments asked of the backing allocator so far
  size_t segments = 0;            // segments held now
};

class BlockPool {
 public:
  // Returns a segment of the given size, or nullptr when there is no memory left.
  using Backing = std::function<void*(size_t bytes)>;
  using Release = std::function<void(void* segment)>;
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;    // requests up to this share segments
  static constexpr size_t kSmallSegment = size_t(2) << 20;  // the segment they share
  static constexpr size_t kLargeRound = size_t(2) << 20;    // large segments are multiples of it
  static constexpr size_t kLargeMinSplit = size_t(1) << 20;  // a smaller rest stays in the block

  BlockPool(Backing backing, Release release);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes` for work on `stream`; nullptr when the backing allocator has no
  // memory even after the cache was given back. 0 bytes gives nullptr.
  void* allocate(size_t bytes, uintptr_t stream = 0);
  // Returns a block to the pool. A pointer this pool did not hand out is ignored.
  void deallocate(void* ptr);
  // Gives every wholly free segment back to the backing allocator.
  void release_cached();
  // The size of a live block (its rounded size), or 0 for another pointer.
  size_t block_size(void* ptr) const;
  BlockPoolStats stats() const { return stats_; }

  static size_t round_size(size_t bytes);

 private:
  struct Block;
  // Free blocks ordered by (stream, size, address): the first at or after (stream, size) is the
  // best fit on that stream.
  struct ByStreamSize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, ByStreamSize>;

  Block* take_free(FreeSet& pool, size_t size, uintptr_t stream);
  Block* new_segment(size_t size, uintptr_t stream, bool small);
  void split(Block* block, size_t size, FreeSet& pool);
  FreeSet& pool_of(const Block* block) { return block->small ? small_ : large_; }

  Backing backing_;
  Release release_;
  FreeSet small_, large_;
  std::unordered_map<void*, Block*> live_;
  std::set<Block*> all_;  // every block, owned here
  BlockPoolStats stats_;

  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    uintptr_t stream = 0;
    bool small = false;
    bool free = false;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
  };
};

}  // namespace mt::core
