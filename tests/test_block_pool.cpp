// The caching allocator's bookkeeping (core/block_pool.h), on the CPU: a backing allocator
// made of malloc counts the "device" allocations the pool makes. The CUDA allocator is this pool
// with cudaMalloc behind it, one per GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/block_pool.h"

using mt::core::BlockPool;

namespace {

constexpr size_t kMiB = size_t(1) << 20;

// malloc behind the pool, with a limit on the bytes it may hold, and a record of what is held.
struct FakeDevice {
  size_t limit = size_t(1) << 40;
  size_t held = 0;
  std::map<void*, size_t> segments;
  std::vector<size_t> sizes;  // of every segment asked for

  // What blocks still live at the end hold, the pool keeps (as a process exiting leaves it to
  // the driver); the fake device is that driver.
  ~FakeDevice() {
    for (const auto& segment : segments) std::free(segment.first);
  }

  BlockPool pool() {
    return BlockPool(
        [this](size_t bytes) -> void* {
          sizes.push_back(bytes);
          if (held + bytes > limit) return nullptr;
          void* p = std::malloc(bytes);
          held += bytes;
          segments.emplace(p, bytes);
          return p;
        },
        [this](void* p) {
          EXPECT_EQ(segments.count(p), 1u) << "released a pointer that is no segment";
          held -= segments[p];
          segments.erase(p);
          std::free(p);
        });
  }
};

}  // namespace

TEST(BlockPool, SmallRequestsShareOneSegmentAndAreReusedAfterFree) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* a = pool.allocate(1000);   // 1024
  void* b = pool.allocate(5000);   // 5120
  void* c = pool.allocate(70000);  // 70144
  EXPECT_EQ(pool.stats().device_allocations, 1u) << "all three from one 2 MiB segment";
  EXPECT_EQ(dev.sizes.front(), BlockPool::kSmallSegment);
  EXPECT_EQ(pool.block_size(a), 1024u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);  // carved one after the other
  EXPECT_EQ(pool.stats().current_bytes, 1024u + 5120u + 70144u);
  pool.deallocate(b);
  void* again = pool.allocate(4000);  // fits in b's freed block: the same memory
  EXPECT_EQ(again, b);
  EXPECT_EQ(pool.stats().device_allocations, 1u);
  pool.deallocate(a);
  pool.deallocate(again);
  pool.deallocate(c);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(pool.stats().cached_bytes, BlockPool::kSmallSegment) << "merged back into one whole segment";
}

TEST(BlockPool, ALargeCachedBlockIsSplitForSmallerLargeRequests) {
  // A big one-off buffer (a convolution search's workspace) freed: later requests of other
  // sizes are carved out of it instead of asking the device again.
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* workspace = pool.allocate(1024 * kMiB);
  pool.deallocate(workspace);
  std::vector<void*> parts;
  for (int i = 0; i < 10; ++i) parts.push_back(pool.allocate(100 * kMiB));
  EXPECT_EQ(pool.stats().device_allocations, 1u);
  EXPECT_EQ(parts.front(), workspace) << "best fit starts at the block's beginning";
  for (void* p : parts) pool.deallocate(p);
  EXPECT_EQ(pool.stats().cached_bytes, 1024 * kMiB);
  // Merged again: the whole block serves a request of its full size.
  EXPECT_EQ(pool.allocate(1024 * kMiB), workspace);
  EXPECT_EQ(pool.stats().device_allocations, 1u);
}

TEST(BlockPool, BestFitTakesTheSmallestBlockThatFits) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* big = pool.allocate(8 * kMiB);
  void* mid = pool.allocate(4 * kMiB);
  void* guard = pool.allocate(2 * kMiB);
  pool.deallocate(big);
  pool.deallocate(mid);
  EXPECT_EQ(pool.allocate(3 * kMiB), mid) << "the 4 MiB block, not the 8 MiB one";
  (void)guard;
}

TEST(BlockPool, RestsTooSmallToKeepStayInTheBlock) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* p = pool.allocate(3 * kMiB);
  pool.deallocate(p);
  // 3 MiB rounds to a 4 MiB segment; 3.5 MiB leaves 0.5 MiB, under the 1 MiB worth splitting.
  void* q = pool.allocate(3 * kMiB + kMiB / 2);
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.block_size(q), 4 * kMiB);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

TEST(BlockPool, ABlockIsReusedOnlyByItsOwnStream) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* on_compute = pool.allocate(4 * kMiB, /*stream=*/1);
  pool.deallocate(on_compute);
  void* on_copy = pool.allocate(4 * kMiB, /*stream=*/2);
  EXPECT_NE(on_copy, on_compute) << "work queued on stream 1 may still use that memory";
  EXPECT_EQ(pool.stats().device_allocations, 2u);
  EXPECT_EQ(pool.allocate(4 * kMiB, 1), on_compute);
}

// Fake stream events: an event is "passed" once the test says its stream has run that far.
struct FakeStreams {
  struct Event {
    uintptr_t stream;
    int position;  // the stream's queue length when it was recorded
  };
  std::map<uintptr_t, int> queued, finished;  // per stream: work queued, work done
  std::vector<Event*> live;
  BlockPool::StreamEvents events() {
    return {[this](uintptr_t s) -> void* {
              live.push_back(new Event{s, queued[s]});
              return live.back();
            },
            [this](void* e) { return finished[static_cast<Event*>(e)->stream] >= static_cast<Event*>(e)->position; },
            [this](void* e) {
              live.erase(std::find(live.begin(), live.end(), static_cast<Event*>(e)));
              delete static_cast<Event*>(e);
            }};
  }
};

// A batch uploaded on a copy stream (2) and read by kernels on the compute stream (1): freed
// while the compute stream still has that work queued, its block must not go to the next upload.
TEST(BlockPool, ABlockUsedOnAnotherStreamWaitsForThatStreamBeforeReuse) {
  FakeDevice dev;
  FakeStreams streams;
  BlockPool pool(
      [&](size_t bytes) -> void* {
        dev.held += bytes;
        return std::malloc(bytes);
      },
      [&](void* p) { std::free(p); }, streams.events());
  void* batch = pool.allocate(4 * kMiB, /*stream=*/2);
  pool.record_stream(batch, /*stream=*/1);
  pool.record_stream(batch, /*stream=*/2);  // its own stream: nothing to wait for
  streams.queued[1] = 5;                     // the forward and backward that read the batch
  pool.deallocate(batch);
  EXPECT_EQ(pool.stats().awaiting_streams, 1u);
  EXPECT_EQ(streams.live.size(), 1u) << "one event, on the compute stream only";
  void* next = pool.allocate(4 * kMiB, 2);
  EXPECT_NE(next, batch) << "handed out while the compute stream may still read it";
  streams.finished[1] = 4;
  pool.collect_finished();
  EXPECT_EQ(pool.stats().awaiting_streams, 1u) << "the compute stream has not reached the free yet";
  streams.finished[1] = 5;
  EXPECT_EQ(pool.allocate(4 * kMiB, 2), batch) << "reused once the compute stream is past the free";
  EXPECT_EQ(pool.stats().awaiting_streams, 0u);
  EXPECT_TRUE(streams.live.empty()) << "the event was released";
  pool.deallocate(next);
  pool.deallocate(batch);
  EXPECT_EQ(pool.stats().awaiting_streams, 0u) << "record_stream lasts one allocation, not the block's life";
}

TEST(BlockPool, OutOfMemoryGivesTheCacheBackAndTriesAgain) {
  FakeDevice dev;
  dev.limit = 10 * kMiB;
  BlockPool pool = dev.pool();
  void* a = pool.allocate(6 * kMiB);
  pool.deallocate(a);  // cached, but of a size that does not fit the next request
  void* b = pool.allocate(8 * kMiB);
  ASSERT_NE(b, nullptr) << "the 6 MiB segment went back to make room";
  EXPECT_EQ(pool.stats().segments, 1u);
  EXPECT_EQ(pool.allocate(4 * kMiB), nullptr) << "nothing left: the caller reports the OOM";
  pool.deallocate(b);
}

TEST(BlockPool, OnlyWhollyFreeSegmentsAreReleased) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  void* a = pool.allocate(1000);
  void* b = pool.allocate(1000);
  void* big = pool.allocate(4 * kMiB);
  pool.deallocate(big);
  pool.deallocate(a);
  pool.release_cached();
  EXPECT_EQ(dev.segments.size(), 1u) << "the small segment still holds b";
  EXPECT_EQ(pool.stats().segments, 1u);
  pool.deallocate(b);
  pool.release_cached();
  EXPECT_TRUE(dev.segments.empty());
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

TEST(BlockPool, StatsAndForeignPointers) {
  FakeDevice dev;
  BlockPool pool = dev.pool();
  EXPECT_EQ(pool.allocate(0), nullptr);
  int local = 0;
  pool.deallocate(&local);  // not ours: ignored
  pool.deallocate(nullptr);
  void* a = pool.allocate(2 * kMiB);
  void* b = pool.allocate(2 * kMiB);
  EXPECT_EQ(pool.stats().peak_bytes, 4 * kMiB);
  pool.deallocate(a);
  pool.deallocate(b);
  EXPECT_EQ(pool.stats().current_bytes, 0u);
  EXPECT_EQ(pool.stats().peak_bytes, 4 * kMiB);
}
