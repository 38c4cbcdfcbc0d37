#include "core/block_pool.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace mt::core {

bool BlockPool::ByStreamSize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

size_t BlockPool::round_size(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

BlockPool::BlockPool(Backing backing, Release release, StreamEvents events)
    : backing_(std::move(backing)), release_(std::move(release)), events_(std::move(events)) {}

BlockPool::~BlockPool() {
  // Segments whose blocks are all free go back; live ones belong to tensors that outlive the
  // pool (a process exiting), and the driver reclaims them.
  release_cached();
  for (Block* b : all_) delete b;
}

void* BlockPool::allocate(size_t bytes, uintptr_t stream) {
  if (bytes == 0) return nullptr;
  collect_finished();
  const size_t size = round_size(bytes);
  const bool small = size <= kSmallLimit;
  FreeSet& pool = small ? small_ : large_;
  Block* block = take_free(pool, size, stream);
  if (block == nullptr) block = new_segment(size, stream, small);
  if (block == nullptr) {
    release_cached();  // (collects finished blocks first)
    block = take_free(pool, size, stream);
    if (block == nullptr) block = new_segment(size, stream, small);
  }
  if (block == nullptr) return nullptr;
  split(block, size, pool);
  block->free = false;
  live_.emplace(block->ptr, block);
  stats_.current_bytes += block->size;
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
  return block->ptr;
}

BlockPool::Block* BlockPool::take_free(FreeSet& pool, size_t size, uintptr_t stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  const auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  stats_.cached_bytes -= block->size;
  return block;
}

BlockPool::Block* BlockPool::new_segment(size_t size, uintptr_t stream, bool small) {
  const size_t bytes = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  void* memory = backing_(bytes);
  if (memory == nullptr) return nullptr;
  ++stats_.device_allocations;
  ++stats_.segments;
  auto* block = new Block;
  block->ptr = static_cast<char*>(memory);
  block->size = bytes;
  block->stream = stream;
  block->small = small;
  all_.insert(block);
  return block;
}

// Cuts `block` to `size` when the rest is worth a block of its own; the rest goes to the pool.
void BlockPool::split(Block* block, size_t size, FreeSet& pool) {
  const size_t rest = block->size - size;
  if (rest < (block->small ? kRound : kLargeMinSplit)) return;
  auto* tail = new Block;
  tail->ptr = block->ptr + size;
  tail->size = rest;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->free = true;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  all_.insert(tail);
  pool.insert(tail);
  stats_.cached_bytes += rest;
}

void BlockPool::record_stream(void* ptr, uintptr_t stream) {
  const auto it = live_.find(ptr);
  if (it == live_.end()) return;
  Block* block = it->second;
  if (stream == block->stream) return;
  MT_CHECK(events_.record != nullptr, "internal: record_stream on a block pool without stream events");
  if (std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end())
    block->used_on.push_back(stream);
}

void BlockPool::deallocate(void* ptr) {
  const auto it = live_.find(ptr);
  if (it == live_.end()) return;
  Block* block = it->second;
  live_.erase(it);
  if (block->used_on.empty()) {
    free_block(block);
    return;
  }
  // Work queued on the other streams until now may still use it: wait for it to pass.
  AwaitingStreams waiting{block, {}};
  for (const uintptr_t s : block->used_on) waiting.events.push_back(events_.record(s));
  block->used_on.clear();
  awaiting_.push_back(std::move(waiting));
  ++stats_.awaiting_streams;
}

void BlockPool::collect_finished() {
  for (size_t i = 0; i < awaiting_.size();) {
    auto& w = awaiting_[i];
    if (!std::all_of(w.events.begin(), w.events.end(), [this](void* e) { return events_.done(e); })) {
      ++i;
      continue;
    }
    for (void* e : w.events) events_.release(e);
    Block* block = w.block;
    awaiting_[i] = std::move(awaiting_.back());
    awaiting_.pop_back();
    --stats_.awaiting_streams;
    free_block(block);
  }
}

void BlockPool::free_block(Block* block) {
  stats_.current_bytes -= block->size;
  FreeSet& pool = pool_of(block);
  // Merge with free neighbours: the segment's pieces become one block again.
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour == nullptr || !neighbour->free) continue;
    pool.erase(neighbour);
    stats_.cached_bytes -= neighbour->size;
    Block* first = neighbour == block->prev ? neighbour : block;
    Block* second = first == neighbour ? block : neighbour;
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->prev = first;
    all_.erase(second);
    delete second;
    block = first;
  }
  block->free = true;
  pool.insert(block);
  stats_.cached_bytes += block->size;
}

void BlockPool::release_cached() {
  collect_finished();
  for (FreeSet* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {  // part of a segment in use
        ++it;
        continue;
      }
      release_(block->ptr);
      stats_.cached_bytes -= block->size;
      --stats_.segments;
      it = pool->erase(it);
      all_.erase(block);
      delete block;
    }
  }
}

size_t BlockPool::block_size(void* ptr) const {
  const auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

}  // namespace mt::core
