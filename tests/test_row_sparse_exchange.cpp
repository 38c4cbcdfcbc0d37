// The row-sparse sum over ranks (dist/ps/row_sparse_exchange.h), on forked loopback ranks: every
// rank ends with the sum of every rank's rows, written by hand here; rows go as rows while that
// is fewer bytes, the table through an allreduce once it is not; bad input is refused.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "dist/ps/row_sparse_exchange.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;

namespace {

constexpr int64_t kRows = 10, kWidth = 3;

// Rank r's gradient: rows r, 4 and 9 - r (so ranks share row 4, and some rows), values by hand.
Tensor table_of(int rank, bool every_row = false) {
  Tensor t = Tensor::zeros({kRows, kWidth});
  for (int64_t row = 0; row < kRows; ++row) {
    if (!every_row && row != rank && row != 4 && row != 9 - rank) continue;
    for (int64_t j = 0; j < kWidth; ++j) t.data<float>()[row * kWidth + j] = static_cast<float>(rank + 1) * (row + 1) + j * 0.25f;
  }
  return t;
}

void expect_sum_of_all(int ranks, bool every_row) {
  EXPECT_TRUE(mt::testing::run_ranks(ranks, [&](mt::testing::RankContext& c) {
    const dist::GradientRows mine = dist::nonzero_rows(table_of(c.rank, every_row));
    const dist::RowsOfAllRanks all = dist::gather_rows(*c.group, mine);
    // Rows are fewer bytes than a ring's 2(N-1)/N tables unless every rank touched every row.
    EXPECT_EQ(all.dense, every_row);
    Tensor dense = Tensor::full({kRows, kWidth}, 1.0);
    dist::add_rows(all, 0.5f, dense);
    for (int64_t i = 0; i < kRows * kWidth; ++i) {
      float want = 1.0f;
      for (int r = 0; r < ranks; ++r) want += 0.5f * table_of(r, every_row).data<float>()[i];
      ASSERT_NEAR(dense.data<float>()[i], want, 1e-5f * std::abs(want)) << "element " << i << " on rank " << c.rank;
    }
  }).ok_or_report());
}

}  // namespace

TEST(RowSparseExchange, NonzeroRowsKeepsTheTouchedRowsInOrder) {
  const dist::GradientRows rows = dist::nonzero_rows(table_of(2));
  EXPECT_EQ(rows.rows, kRows);
  EXPECT_EQ(rows.width, kWidth);
  EXPECT_EQ(rows.ids, (std::vector<int64_t>{2, 4, 7}));
  ASSERT_EQ(rows.values.shape(), (core::Shape{3, kWidth}));
  EXPECT_EQ(rows.values.to_vector()[3], 3.0f * 5);  // row 4, column 0 of rank 2
  // A row that is zero but for one element is kept; a wholly zero table has none.
  Tensor t = Tensor::zeros({4, 2});
  t.data<float>()[7] = -1e-30f;
  EXPECT_EQ(dist::nonzero_rows(t).ids, (std::vector<int64_t>{3}));
  EXPECT_TRUE(dist::nonzero_rows(Tensor::zeros({4, 2})).ids.empty());
}

TEST(RowSparseExchange, SumsEveryRanksRowsOnTwoAndThreeRanks) {
  expect_sum_of_all(2, false);
  expect_sum_of_all(3, false);
}

TEST(RowSparseExchange, TablesWhoseEveryRowIsTouchedGoThroughAnAllreduce) { expect_sum_of_all(3, true); }

// Rank 0 touched one row, rank 1 nine: by its own receipts rank 0 would pick the allreduce
// (9 rows in) and rank 1 the rows (1 in), and the two collectives would never meet. The choice
// is made from the counts every rank shares.
TEST(RowSparseExchange, UnevenRowCountsStillAgreeOnTheForm) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& c) {
    Tensor t = Tensor::zeros({kRows, kWidth});
    for (int64_t row = 0; row < (c.rank == 0 ? 1 : 9); ++row) t.data<float>()[row * kWidth] = 1.0f + row;
    const dist::RowsOfAllRanks all = dist::gather_rows(*c.group, dist::nonzero_rows(t));
    EXPECT_FALSE(all.dense);  // 10 rows, 5 received on average: 100 bytes against the ring's 120
    Tensor dense = Tensor::zeros({kRows, kWidth});
    dist::add_rows(all, 1.0f, dense);
    EXPECT_EQ(dense.data<float>()[0], 2.0f);  // row 0 from both ranks
    EXPECT_EQ(dense.data<float>()[8 * kWidth], 9.0f);
  }).ok_or_report());
}

TEST(RowSparseExchange, RefusesWhatIsNotATableOfFloats) {
  EXPECT_THROW(dist::nonzero_rows(Tensor::zeros({3}, core::DType::Int64)), core::Error);
  EXPECT_THROW(dist::nonzero_rows(Tensor()), core::Error);
  dist::RowsOfAllRanks all;
  all.rows = kRows;
  all.width = kWidth;
  all.values = Tensor::zeros({0, kWidth});
  Tensor wrong = Tensor::zeros({kRows, kWidth + 1});
  try {
    dist::add_rows(all, 1.0f, wrong);
    FAIL() << "a gradient of another shape was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[10, 3]"), std::string::npos) << e.what();
  }
}
