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
//     queued on one stream runs in order, so a block freed there can be handed out there at
//     once); a block also used on other streams is told so with record_stream (PyTorch's
//     record_stream), and when it is freed an event is recorded on each of those streams: the
//     block returns to the pool only once every event has passed, so no stream's queued work
//     can still read or write it when it is handed out again;
//   - when the backing allocator has no memory, the pool gives its wholly free segments back
//     and tries once more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <unordered_map>
#include <vector>

namespace mt::core {

struct BlockPoolStats {
  size_t current_bytes = 0;       // in blocks handed out
  size_t peak_bytes = 0;          // the most ever handed out at once
  size_t cached_bytes = 0;        // in free blocks kept for reuse
  size_t device_allocations = 0;  // segments asked of the backing allocator so far
  size_t segments = 0;            // segments held now
  size_t awaiting_streams = 0;    // freed blocks waiting for other streams' work to pass
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

  // Markers in a stream's queue, for blocks used on more streams than their own: `record` puts
  // one at the current end of `stream`'s queue, `done` says whether the device has reached it,
  // `release` frees it. The CUDA allocator passes cudaEvent calls; the tests pass fakes.
  struct StreamEvents {
    std::function<void*(uintptr_t stream)> record;
    std::function<bool(void* event)> done;
    std::function<void(void* event)> release;
  };

  BlockPool(Backing backing, Release release, StreamEvents events = {});
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes` for work on `stream`; nullptr when the backing allocator has no
  // memory even after the cache was given back. 0 bytes gives nullptr.
  void* allocate(size_t bytes, uintptr_t stream = 0);
  // Returns a block to the pool: at once when only its own stream used it, else once the
  // events recorded now on the other streams have passed. A pointer this pool did not hand out
  // is ignored.
  void deallocate(void* ptr);
  // The live block at `ptr` is used by work on `stream` too (a copy stream, a communication
  // stream). Its own stream needs no record. Needs StreamEvents; an unknown pointer is ignored.
  void record_stream(void* ptr, uintptr_t stream);
  // Returns the freed blocks whose streams have finished with them (also done by allocate).
  void collect_finished();
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
  void free_block(Block* block);  // back into its pool, merged with free neighbours
  FreeSet& pool_of(const Block* block) { return block->small ? small_ : large_; }

  Backing backing_;
  Release release_;
  StreamEvents events_;
  struct AwaitingStreams {
    Block* block;
    std::vector<void*> events;  // one per other stream that used it, recorded at the free
  };
  std::vector<AwaitingStreams> awaiting_;
  FreeSet small_, large_;
  std::unordered_map<void*, Block*> live_;
  std::set<Block*> all_;  // every block, owned here
  BlockPoolStats stats_;

  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    uintptr_t stream = 0;
    std::vector<uintptr_t> used_on;  // other streams its work was queued on (record_stream)
    bool small = false;
    bool free = false;
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
  };
};

}  // namespace mt::core
