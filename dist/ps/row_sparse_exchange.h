// The sum over ranks of a gradient whose rows are mostly zero: an embedding lookup's, where only
// the rows of the batch's tokens are touched (BERT-tiny, batch 16 x 128 tokens: about 2,000 of
// 30,522 rows). Each rank sends the rows it touched, with their ids, to every other (allgatherv),
// and every rank adds them up in rank order, so all end with the same bits. When the rows of all
// ranks together would move more bytes than a ring allreduce of the whole table, the table is
// allreduced instead; every rank sees the same counts and so makes the same choice. Exact: a row
// left out is zero on that rank, and adds nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

// The rows of `grad` (float32, [rows, ...] read as [rows, width]) that are not all zero, on the host.
struct GradientRows {
  int64_t rows = 0, width = 0;  // the table's shape
  std::vector<int64_t> ids;     // increasing
  Tensor values;                // float32 [ids.size(), width] on the host
};
GradientRows nonzero_rows(const Tensor& grad);

// Every rank's rows, gathered (collective over `group`; every wait keeps the group's timeout).
struct RowsOfAllRanks {
  int64_t rows = 0, width = 0;
  bool dense = false;            // true: `values` is the whole table, summed
  std::vector<int64_t> ids;      // sparse: rank 0's rows, then rank 1's, ...
  Tensor values;                 // sparse: [ids.size(), width]; dense: [rows, width]
  int64_t bytes_received = 0;    // by this rank, ids and values (an estimate for the ring)
};
RowsOfAllRanks gather_rows(ProcessGroup& group, const GradientRows& mine);

// dense (float32 [rows, width] as the gathered table, any device) += scale * the sum of `all`.
void add_rows(const RowsOfAllRanks& all, float scale, Tensor& dense);

}  // namespace mt::dist
