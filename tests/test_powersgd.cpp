// The PowerSGD hook (dist/ssgd/powersgd_hook.h) on real Gloo ranks forked on loopback: one
// bucket against the paper's algorithm computed here in double precision (P = M Q summed,
// Gram-Schmidt, Q = M^T P averaged, M ~ P Q^T, error feedback, Q kept from one iteration to the
// next), the warm-up iterations as plain allreduce, what travels ((n + m) r values per matrix, not
// n m, and not the exact mean), the state surviving a checkpoint; Gram-Schmidt on its own. The
// hook through S-SGD and its bad settings: tests/test_comm_hook.cpp; exact resume through the
// Trainer: tests/test_dist_resume.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/runtime.h"
#include "core/serialize.h"
#include "dist/ssgd/powersgd_hook.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "dist/comm/store.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
using mt::testing::state_entry;

namespace {

using Matrix = std::vector<std::vector<double>>;  // rows

Matrix zeros(int64_t n, int64_t m) { return Matrix(n, std::vector<double>(m, 0.0)); }
Matrix times(const Matrix& a, const Matrix& b, bool transpose_a = false, bool transpose_b = false) {
  const size_t n = transpose_a ? a[0].size() : a.size(), k = transpose_a ? a.size() : a[0].size();
  const size_t m = transpose_b ? b.size() : b[0].size();
  Matrix c = zeros(n, m);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j)
      for (size_t l = 0; l < k; ++l)
        c[i][j] += (transpose_a ? a[l][i] : a[i][l]) * (transpose_b ? b[j][l] : b[l][j]);
  return c;
}
// The paper's orthogonalization: classical Gram-Schmidt on the columns.
void gram_schmidt(Matrix& p) {
  const size_t n = p.size(), r = p[0].size();
  for (size_t i = 0; i < r; ++i) {
    for (size_t j = 0; j < i; ++j) {
      double dot = 0;
      for (size_t k = 0; k < n; ++k) dot += p[k][i] * p[k][j];
      for (size_t k = 0; k < n; ++k) p[k][i] -= dot * p[k][j];
    }
    double norm = 0;
    for (size_t k = 0; k < n; ++k) norm += p[k][i] * p[k][i];
    for (size_t k = 0; k < n; ++k) p[k][i] /= std::sqrt(norm);
  }
}

// Parameters of every kind: two matrices worth compressing at rank 2 (12 x 3 x 4 viewed as 12 x 12;
// 16 x 10), a bias and a matrix too small to gain (3 x 2). The bucket holds them out of order.
struct Model {
  std::vector<Tensor> params = {Tensor::zeros({12, 3, 4}), Tensor::zeros({5}), Tensor::zeros({16, 10}),
                                Tensor::zeros({3, 2})};
  std::vector<std::vector<size_t>> layout = {{2, 1, 0, 3}};
  std::vector<int64_t> n = {12, 5, 16, 3}, m = {12, 1, 10, 2};
  bool compressed(size_t p) const { return p == 0 || p == 2; }
};

// Rank r's gradient of parameter p at iteration it, as an n x m matrix: full rank.
Matrix gradient(int rank, int it, size_t p, int64_t n, int64_t m) {
  Matrix g = zeros(n, m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      g[i][j] = std::sin(0.37 * double(i * m + j) + 1.1 * rank + 2.3 * it + 0.5 * double(p)) +
                0.3 * std::cos(double(i * j));
  return g;
}

dist::GradBucket bucket_of(const Model& model, int rank, int it) {
  std::vector<float> flat;
  for (size_t p : model.layout[0])
    for (const auto& row : gradient(rank, it, p, model.n[p], model.m[p]))
      flat.insert(flat.end(), row.begin(), row.end());
  dist::GradBucket b;
  b.grad = Tensor::from_vector(flat, {static_cast<int64_t>(flat.size())});
  for (size_t p : model.layout[0]) b.params.push_back(model.params[p]);
  return b;
}

}  // namespace

TEST(PowerSgd, GramSchmidtGivesOrthonormalColumnsOfTheSameSpan) {
  // 4 x 3, row-major; the third column is zero.
  std::vector<float> p = {3, 1, 0, 4, 2, 0, 0, 5, 0, 0, 1, 0};
  dist::orthogonalize_columns(p.data(), 4, 3);
  auto col = [&](int c) { return std::vector<double>{p[c], p[3 + c], p[6 + c], p[9 + c]}; };
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  EXPECT_NEAR(p[0], 0.6, 1e-6);  // the first column, normalized: (3, 4, 0, 0) / 5
  EXPECT_NEAR(p[3], 0.8, 1e-6);
  EXPECT_NEAR(dot(col(0), col(0)), 1.0, 1e-6);
  EXPECT_NEAR(dot(col(1), col(1)), 1.0, 1e-6);
  EXPECT_NEAR(dot(col(0), col(1)), 0.0, 1e-6);
  // The second column minus its part along the first: (1, 2, 5, 1) - 2.2 (0.6, 0.8, 0, 0), normalized.
  const double norm = std::sqrt(std::pow(1 - 1.32, 2) + std::pow(2 - 1.76, 2) + 25 + 1);
  EXPECT_NEAR(p[1], (1 - 1.32) / norm, 1e-6);
  EXPECT_NEAR(p[7], 5 / norm, 1e-6);
  EXPECT_EQ(col(2), std::vector<double>(4, 0.0));  // a zero column stays zero, not NaN
}

// Three ranks: one warm-up iteration of plain allreduce, then two of PowerSGD at rank 2 against
// the reference: the average, this rank's residual and the shared Q after each.
TEST(PowerSgd, Gloo_OneBucketFollowsThePaperOnThreeRanks) {
  EXPECT_TRUE(mt::testing::run_ranks(3, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    const Model model;
    auto hook = dist::make_powersgd_hook(ctx.group, {.rank = 2, .start_iter = 1, .min_compression_rate = 2.0});
    hook->set_layout(model.layout, model.params);
    EXPECT_FALSE(hook->exact_average());
    EXPECT_TRUE(hook->keeps_state_per_rank());
    EXPECT_EQ(hook->name(), "powersgd(rank=2)");

    // The reference's state: the first Q (the hook's own random draw, the same on every rank) and
    // every rank's residuals, per compressed parameter 0 and 2.
    std::map<size_t, Matrix> q;
    std::map<std::pair<int, size_t>, Matrix> residual;
    const std::vector<float> q0 = state_entry(*hook, "powersgd.q").to_vector();
    ASSERT_EQ(q0.size(), size_t(12 * 2 + 10 * 2));
    for (size_t p : {size_t(0), size_t(2)}) {
      q[p] = zeros(model.m[p], 2);
      for (int64_t j = 0; j < model.m[p]; ++j)
        for (int c = 0; c < 2; ++c) q[p][j][c] = q0[(p == 0 ? 0 : 24) + j * 2 + c];
      for (int r = 0; r < 3; ++r) residual[{r, p}] = zeros(model.n[p], model.m[p]);
    }

    for (int it = 0; it < 3; ++it) {
      SCOPED_TRACE("iteration " + std::to_string(it));
      dist::GradBucket b = bucket_of(model, ctx.rank, it);
      hook->send(b);
      hook->finish(b);
      hook->end_iteration();
      const std::vector<float> got = b.grad.to_vector();
      int64_t offset = 0;
      for (size_t p : model.layout[0]) {
        const int64_t n = model.n[p], m = model.m[p];
        Matrix want = zeros(n, m);
        if (it == 0 || !model.compressed(p)) {  // the exact mean
          for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < m; ++j) want[i][j] += gradient(r, it, p, n, m)[i][j] / 3.0;
        } else {
          std::vector<Matrix> corrected;
          Matrix sum_p = zeros(n, 2);
          for (int r = 0; r < 3; ++r) {
            Matrix mr = gradient(r, it, p, n, m);
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < m; ++j) mr[i][j] += residual[{r, p}][i][j];
            const Matrix pr = times(mr, q[p]);
            for (int64_t i = 0; i < n; ++i)
              for (int c = 0; c < 2; ++c) sum_p[i][c] += pr[i][c];
            corrected.push_back(mr);
          }
          gram_schmidt(sum_p);
          Matrix new_q = zeros(m, 2);
          for (int r = 0; r < 3; ++r) {
            const Matrix qr = times(corrected[r], sum_p, /*transpose_a=*/true);
            for (int64_t j = 0; j < m; ++j)
              for (int c = 0; c < 2; ++c) new_q[j][c] += qr[j][c] / 3.0;
          }
          q[p] = new_q;
          want = times(sum_p, new_q, false, /*transpose_b=*/true);
          for (int r = 0; r < 3; ++r)
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < m; ++j) residual[{r, p}][i][j] = corrected[r][i][j] - want[i][j];
        }
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j)
            ASSERT_NEAR(got[offset + i * m + j], want[i][j], 2e-4) << "parameter " << p << " at " << i << ", " << j;
        offset += n * m;
      }
      // The hook's state in parameter order: Q (shared) and this rank's residual.
      const std::vector<float> hook_q = state_entry(*hook, "powersgd.q").to_vector();
      const std::vector<float> hook_residual = state_entry(*hook, "powersgd.residual").to_vector();
      ASSERT_EQ(hook_residual.size(), size_t(144 + 160));
      int64_t qo = 0, ro = 0;
      for (size_t p : {size_t(0), size_t(2)}) {
        const Matrix& mine = residual[std::make_pair(ctx.rank, p)];
        for (int64_t j = 0; j < model.m[p]; ++j)
          for (int c = 0; c < 2; ++c) EXPECT_NEAR(hook_q[qo++], q[p][j][c], 2e-4) << p;
        for (int64_t i = 0; i < model.n[p]; ++i)
          for (int64_t j = 0; j < model.m[p]; ++j) EXPECT_NEAR(hook_residual[ro++], mine[i][j], 2e-4) << p;
      }
    }
  }).ok_or_report());
}

// What travels: a 16 x 16 full-rank gradient, a bias and a 2 x 100 matrix too small to gain at
// rank 1 send the bias and the small matrix uncompressed, P (16 values) and Q (16), not 256 values
// for the large one; its average is then not the exact mean. The warm-up iteration before sends
// the whole bucket in one allreduce and gives the exact mean. The summary counts what travelled.
TEST(PowerSgd, Gloo_SendsLowRankFactorsNotTheGradient) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    auto tally = std::make_shared<mt::testing::Tally>();
    auto counting = std::make_shared<mt::testing::CountingGroup>(ctx.group, mt::testing::world_members(2), tally);
    auto hook = dist::make_powersgd_hook(counting, {.rank = 1, .start_iter = 1});
    const std::vector<Tensor> params = {Tensor::zeros({16, 16}), Tensor::zeros({4}), Tensor::zeros({2, 100})};
    constexpr size_t kValues = 256 + 4 + 200;
    hook->set_layout({{0, 1, 2}}, params);
    for (int it = 0; it < 2; ++it) {
      std::vector<float> g(kValues);
      std::vector<double> mean(kValues);
      for (size_t i = 0; i < g.size(); ++i) {
        auto value = [&](int r) { return std::sin(0.91 * double(i * i) + 1.7 * r + it); };
        g[i] = static_cast<float>(value(ctx.rank));
        mean[i] = (value(0) + value(1)) / 2;
      }
      dist::GradBucket b;
      b.grad = Tensor::from_vector(g, {static_cast<int64_t>(kValues)});
      b.params = params;
      tally->allreduced.clear();
      hook->send(b);
      hook->finish(b);
      hook->end_iteration();
      const std::vector<float> got = b.grad.to_vector();
      double matrix_diff = 0, uncompressed_diff = 0;
      for (size_t i = 0; i < 256; ++i) matrix_diff = std::max(matrix_diff, std::fabs(got[i] - mean[i]));
      for (size_t i = 256; i < kValues; ++i) uncompressed_diff = std::max(uncompressed_diff, std::fabs(got[i] - mean[i]));
      EXPECT_LT(uncompressed_diff, 1e-6) << it;
      if (it == 0) {
        EXPECT_EQ(tally->allreduced, std::vector<int64_t>({static_cast<int64_t>(kValues)}));
        EXPECT_LT(matrix_diff, 1e-6);
      } else {
        EXPECT_EQ(tally->allreduced, std::vector<int64_t>({204, 16, 16}));  // bias and small matrix, P, Q
        EXPECT_GT(matrix_diff, 0.1) << "a rank-1 approximation of a full-rank mean";
      }
    }
    // (460 + 204 + 16 + 16) values of 4 bytes over 2 iterations: 1392 bytes an iteration.
    const std::string summary = hook->epoch_summary();
    EXPECT_NE(summary.find("1.4 KB sent per iteration"), std::string::npos) << summary;
  }).ok_or_report());
}

// The state a checkpoint keeps (iteration, Q, every rank's residual) continues a fresh hook
// exactly where the first one was: the next exchange gives the same bits.
TEST(PowerSgd, Gloo_StateContinuesAFreshHookExactly) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    const Model model;
    const dist::PowerSgdOptions options{.rank = 2, .start_iter = 1};
    auto first = dist::make_powersgd_hook(ctx.group, options);
    first->set_layout(model.layout, model.params);
    for (int it = 0; it < 3; ++it) {
      dist::GradBucket b = bucket_of(model, ctx.rank, it);
      first->send(b);
      first->finish(b);
      first->end_iteration();
    }
    first->prepare_checkpoint();
    // A checkpoint is rank 0's state: every rank loads it (passed here through the store).
    if (ctx.rank == 0) {
      core::Archive archive;
      first->append_state(archive.tensors);
      const std::string bytes = core::encode_archive(archive, "rank 0's state");
      ctx.store->set("powersgd_state", std::vector<uint8_t>(bytes.begin(), bytes.end()));
    }
    const std::vector<uint8_t> bytes = ctx.store->get("powersgd_state");
    const core::StateDict rank0_state =
        core::decode_archive(std::string(bytes.begin(), bytes.end()), "rank 0's state").tensors;
    EXPECT_FALSE(rank0_state.empty());

    auto second = dist::make_powersgd_hook(ctx.group, options);
    second->set_layout({{0, 1}, {2, 3}}, model.params);  // another layout: the state is per parameter
    second->load_state(rank0_state);
    second->set_layout(model.layout, model.params);
    for (int it = 3; it < 5; ++it) {
      dist::GradBucket a = bucket_of(model, ctx.rank, it), b = bucket_of(model, ctx.rank, it);
      first->send(a);
      first->finish(a);
      first->end_iteration();
      second->send(b);
      second->finish(b);
      second->end_iteration();
      EXPECT_EQ(a.grad.to_vector(), b.grad.to_vector()) << "iteration " << it;
    }
  }).ok_or_report());
}
