// Label and index checks read late. Cross-entropy, NLL and embedding take integer indices on the
// GPU; an index out of range must be an Error naming the op and the valid range, never a read
// out of bounds. The kernels skip such an element and record it, but reading that record right
// after the kernel is a copy back that drains the device's queue, every forward pass. Instead
// each check is queued here, the kernels record the first failure in one word per device, and
// the word is read at the next copy to the host (the loss read for the progress line, an
// evaluation, core::synchronize), when the queue has drained anyway: one 8-byte copy there, none
// in the forward pass. The Error then names the first failing check of those queued, and its
// smallest failing position.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace mt::core::cuda {

struct IndexCheck {
  unsigned long long* record = nullptr;  // the device's word: the first failure since the last read
  uint32_t id = 0;                       // this check's number since the last read
#ifdef __CUDACC__
  // In a kernel: element i of the n checked holds a value out of range. The larger key wins:
  // the earliest check, then the smallest position.
  __device__ void report(int64_t i, int64_t n) const {
    atomicMax(record, (static_cast<unsigned long long>(0xffffffffu - id) << 32) |
                          static_cast<unsigned long long>(n - i));
  }
#endif
};

// The Error's text for a bad value at a position, e.g. "embedding: index 9 at position 2 is
// out of range for a table of 4 rows (valid indices are 0..3); ...".
using DescribeBadIndex = std::function<std::string(int64_t value, int64_t position)>;

// Queues a check of `indices` (int64, on a GPU, fewer than 2^32 elements; kept alive until the
// read) whose kernel reports through the returned IndexCheck. After 4096 checks without a read
// it reads first (a training loop that never reads a value back still fails in time).
IndexCheck defer_index_check(const Tensor& indices, DescribeBadIndex describe);

// Reads the record of the checks queued on `device` since the last read and forgets them;
// throws the first failure's Error (the record is cleared: the device stays usable). Nothing
// queued: returns at once. Called after copies to the host and by core::synchronize.
void read_index_checks(int device);

}  // namespace mt::core::cuda
