// DS-Sync (docs/algorithms.md section 3). Schedules: every partition is valid, and information
// reaches every rank within the stated period (the product of the mixing matrices over any
// window of that length has no zero entry); the bottleneck schedule crosses racks only every
// cross_period iterations, and then with at most cross_ranks_per_rack ranks of a rack crossing
// (by hand for 8 ranks, and over many layouts). Synchronizer, over real Gloo with forked ranks: zero learning rate
// and equal weights change nothing; different weights converge to their average exactly as the
// product of the mixing matrices predicts (weights and spread); evaluation sees the average and
// training resumes from the local weights; the trainer learns on 4 ranks; limited crossing
// matches a step-then-average reference and counts one crossing rank per rack; the rack probe
// frees its pair communicators; bad configs are Errors that name the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/dssync/dssync_schedule.h"
#include "dist/dssync/dssync_synchronizer.h"
#include "dist/registry.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
using Matrix = std::vector<std::vector<double>>;
namespace fs = std::filesystem;

namespace {

Matrix identity(int n) {
  Matrix m(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i) m[i][i] = 1.0;
  return m;
}

// The NxN averaging matrix of a partition: W[i][j] = 1/|G| when i and j share group G.
Matrix mixing_matrix(const dist::Partition& partition, int n) {
  Matrix w(n, std::vector<double>(n, 0.0));
  for (const auto& grp : partition)
    for (int i : grp)
      for (int j : grp) w[i][j] = 1.0 / static_cast<double>(grp.size());
  return w;
}

Matrix matmul(const Matrix& a, const Matrix& b) {
  const size_t n = a.size(), k = b.size(), m = b.empty() ? 0 : b[0].size();
  Matrix c(n, std::vector<double>(m, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t l = 0; l < k; ++l)
      for (size_t j = 0; j < m; ++j) c[i][j] += a[i][l] * b[l][j];
  return c;
}

// The mixing of iterations [t0, t0 + len): x_after = P x_before with P = W_{t0+len-1} ... W_t0.
Matrix product(const dist::DsSyncSchedule& s, int64_t t0, int64_t len) {
  Matrix p = identity(s.world_size());
  for (int64_t t = t0; t < t0 + len; ++t) p = matmul(mixing_matrix(s.at(t), s.world_size()), p);
  return p;
}

bool all_positive(const Matrix& m) {
  for (const auto& row : m)
    for (double v : row)
      if (!(v > 0.0)) return false;
  return true;
}

bool is_power(int n, int g) {
  int64_t p = 1;
  while (p < n) p *= g;
  return p == n;
}

dist::DsSyncSchedule make_schedule(int n, int g, const std::string& type = "butterfly") {
  dist::DsSyncScheduleOptions o;
  o.world_size = n;
  o.group_size = g;
  o.type = type;
  o.seed = 42;
  return dist::DsSyncSchedule(o);
}

}  // namespace

// ---- Schedules ----

TEST(DsSyncSchedule, PureButterflyMatchesTheDigitsAndAveragesExactly) {
  // The reference code's 4 workers: {0,1}{2,3} then {0,2}{1,3} (digit 0, then digit 1).
  const auto phases = dist::butterfly_phases(4, 2);
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(dist::partition_str(phases[0]), "{0,1}{2,3}");
  EXPECT_EQ(dist::partition_str(phases[1]), "{0,2}{1,3}");
  EXPECT_EQ(dist::partition_str(dist::butterfly_phases(9, 3)[1]), "{0,3,6}{1,4,7}{2,5,8}");
  // After m phases (any rotation) every rank holds exactly the average.
  for (auto [n, g] : {std::pair{8, 2}, {9, 3}, {16, 4}, {16, 2}}) {
    const auto s = make_schedule(n, g);
    for (int64_t t0 = 0; t0 < s.cycle(); ++t0) {
      const Matrix p = product(s, t0, s.cycle());
      for (const auto& row : p)
        for (double v : row) EXPECT_NEAR(v, 1.0 / n, 1e-12) << n << " ranks, g " << g << ", t0 " << t0;
    }
  }
  EXPECT_THROW(dist::butterfly_phases(6, 2), core::Error);
}

TEST(DsSyncSchedule, EveryNAndGroupSizeGivesValidPartitionsThatReachEveryRank) {
  for (int n : {2, 3, 4, 5, 6, 8, 9, 12, 16}) {
    for (int g : {2, 3, 4}) {
      const auto s = make_schedule(n, g);
      for (const auto& p : s.partitions()) {
        EXPECT_NO_THROW(dist::check_partition(p, n)) << n << " ranks, g " << g;
        for (const auto& grp : p) EXPECT_LE(static_cast<int>(grp.size()), g) << dist::partition_str(p);
      }
      // The stated period: m phases for N = g^m; 2(m+1) for the folded butterfly (cycle m+1).
      const int64_t period = is_power(n, g) ? s.cycle() : 2 * s.cycle();
      for (int64_t t0 = 0; t0 < s.cycle(); ++t0) {
        EXPECT_TRUE(all_positive(product(s, t0, period)))
            << n << " ranks, g " << g << ": information does not reach every rank within " << period
            << " iterations from t = " << t0 << "\n" << s.describe();
      }
      // Every rank's group at t agrees with the partition at t.
      for (int64_t t = 0; t < 2 * s.cycle(); ++t)
        for (int r = 0; r < n; ++r) {
          const auto& grp = s.group_of(t, r);
          EXPECT_NE(std::find(grp.begin(), grp.end(), r), grp.end());
        }
    }
  }
}

TEST(DsSyncSchedule, RandomScheduleIsSharedValidAndMixes) {
  for (int n : {2, 3, 4, 5, 6, 8, 9, 12, 16}) {
    for (int g : {2, 3, 4}) {
      const auto a = make_schedule(n, g, "random"), b = make_schedule(n, g, "random");
      EXPECT_LE(a.partitions().size(), 16u);  // 16 drawn; duplicates (small N) kept once
      for (int64_t t = 0; t < 100; ++t) {
        EXPECT_EQ(a.at(t), b.at(t)) << "the same seed must give every rank the same schedule";
        EXPECT_NO_THROW(dist::check_partition(a.at(t), n));
      }
      // Not guaranteed by construction; with this seed 32 iterations reach everyone.
      EXPECT_TRUE(all_positive(product(a, 0, 32))) << n << " ranks, g " << g << "\n" << a.describe();
    }
  }
  dist::DsSyncScheduleOptions o;
  o.world_size = 8;
  o.type = "random";
  o.seed = 1;
  const dist::DsSyncSchedule other(o);
  int differ = 0;
  for (int64_t t = 0; t < 20; ++t) differ += other.at(t) != make_schedule(8, 2, "random").at(t);
  EXPECT_GT(differ, 0) << "another seed, another schedule";
}

TEST(DsSyncSchedule, BottleneckScheduleCrossesRacksOnlyEveryCrossPeriod) {
  struct Case {
    int n, g, cross_period;
    std::vector<int> racks;
  };
  const std::vector<Case> cases = {
      {8, 2, 4, {0, 0, 0, 0, 1, 1, 1, 1}},
      {8, 2, 3, {0, 0, 1, 1, 2, 2, 3, 3}},
      {6, 2, 3, {0, 0, 0, 1, 1, 1}},
      {12, 3, 5, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
      {9, 3, 2, {0, 0, 0, 1, 1, 1, 2, 2, 2}},
      {5, 2, 4, {0, 1, 0, 1, 1}},  // interleaved racks of unequal size
  };
  for (const auto& c : cases) {
    dist::DsSyncScheduleOptions o;
    o.world_size = c.n;
    o.group_size = c.g;
    o.cross_period = c.cross_period;
    o.rack_of = c.racks;
    const dist::DsSyncSchedule s(o);
    int crossings = 0;
    for (int64_t t = 0; t < 3 * s.cycle(); ++t) {
      const bool crosses = s.crosses_racks(s.at(t));
      EXPECT_EQ(crosses, t % c.cross_period == c.cross_period - 1)
          << c.n << " ranks, iteration " << t << ": " << dist::partition_str(s.at(t));
      crossings += crosses;
      EXPECT_NO_THROW(dist::check_partition(s.at(t), c.n));
    }
    EXPECT_GT(crossings, 0);
    for (int64_t t0 = 0; t0 < s.cycle(); ++t0) {
      EXPECT_TRUE(all_positive(product(s, t0, 2 * s.cycle())))
          << c.n << " ranks: the bottleneck schedule does not reach everyone\n" << s.describe();
    }
  }
}

namespace {

// Ranks of each rack in a group that spans racks: rack id -> count.
std::map<int, int> crossers_per_rack(const dist::Partition& p, const std::vector<int>& rack_of) {
  std::map<int, int> n;
  for (const auto& g : p) {
    bool spans = false;
    for (int r : g) spans = spans || rack_of[r] != rack_of[g[0]];
    if (spans)
      for (int r : g) ++n[rack_of[r]];
  }
  return n;
}

// The 8-rank, two-rack schedule of the hand-computed tests below (one cycle).
std::vector<dist::Partition> limited_crossing_by_hand() {
  return {
      {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
      {{0, 4}, {1, 3}, {2}, {5, 7}, {6}},
      {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
      {{0}, {1, 5}, {2, 3}, {4}, {6, 7}},
      {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
      {{0}, {1, 3}, {2, 6}, {4}, {5, 7}},
      {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
      {{0, 1}, {2}, {3, 7}, {4, 5}, {6}},
  };
}

}  // namespace

// Bottleneck-aware crossing, by hand: 8 ranks in racks {0..3} {4..7}, pairs, crossing every 2nd
// iteration, one rank per rack crossing. The butterfly's crossing phase is {0,4}{1,5}{2,6}{3,7};
// each crossing iteration keeps the next pair of it, and the other ranks average in their rack's
// phase (cut to the ranks left).
TEST(DsSyncSchedule, LimitedCrossingSendsOneRankPerRackAcrossByHand) {
  dist::DsSyncScheduleOptions o;
  o.world_size = 8;
  o.group_size = 2;
  o.cross_period = 2;
  o.rack_of = {0, 0, 0, 0, 1, 1, 1, 1};
  const dist::DsSyncSchedule s(o);
  const std::vector<dist::Partition> expected = limited_crossing_by_hand();
  for (int64_t t = 0; t < 16; ++t) EXPECT_EQ(s.at(t), expected[static_cast<size_t>(t % 8)]) << "iteration " << t;
  EXPECT_EQ(s.cycle(), 8);
}

// At most cross_ranks_per_rack ranks of each rack cross in every iteration, in every layout of
// the bottleneck cases, and at least one pair of racks is joined in every crossing iteration;
// with no limit (0) the butterfly's crossing phase sends more across (the contrast).
TEST(DsSyncSchedule, LimitedCrossingKeepsEveryRackWithinItsFlows) {
  struct Case {
    int n, g, cross_period;
    std::vector<int> racks;
  };
  const std::vector<Case> cases = {
      {8, 2, 2, {0, 0, 0, 0, 1, 1, 1, 1}},
      {8, 2, 3, {0, 0, 1, 1, 2, 2, 3, 3}},
      {6, 2, 3, {0, 0, 0, 1, 1, 1}},
      {12, 3, 5, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}},
      {9, 3, 2, {0, 0, 0, 1, 1, 1, 2, 2, 2}},
      {5, 2, 4, {0, 1, 0, 1, 1}},
  };
  for (const auto& c : cases) {
    int most_unlimited = 0;
    for (int limit : {0, 1, 2}) {
      dist::DsSyncScheduleOptions o;
      o.world_size = c.n;
      o.group_size = c.g;
      o.cross_period = c.cross_period;
      o.rack_of = c.racks;
      o.cross_ranks_per_rack = limit;
      const dist::DsSyncSchedule s(o);
      for (int64_t t = 0; t < 2 * s.cycle(); ++t) {
        const auto crossers = crossers_per_rack(s.at(t), c.racks);
        const bool crossing = t % c.cross_period == c.cross_period - 1;
        EXPECT_EQ(crossers.size() >= 2, crossing) << c.n << " ranks, limit " << limit << ", iteration " << t
                                                  << ": " << dist::partition_str(s.at(t));
        for (const auto& [rack, k] : crossers) {
          if (limit == 0) most_unlimited = std::max(most_unlimited, k);
          if (limit > 0) {
            EXPECT_LE(k, limit) << c.n << " ranks, rack " << rack << ", iteration " << t << ": "
                                << dist::partition_str(s.at(t));
          }
        }
      }
      for (int64_t t0 = 0; t0 < s.cycle(); ++t0) {
        EXPECT_TRUE(all_positive(product(s, t0, 2 * s.cycle())))
            << c.n << " ranks, limit " << limit << ": information does not reach everyone\n" << s.describe();
      }
    }
    EXPECT_GT(most_unlimited, 1) << c.n << " ranks: without a limit more than one rank of a rack crosses";
  }
}

// With the racks known, the default cross_period 1 cannot keep the default crossing limit (every
// iteration would cross, and the ranks left behind cannot average among themselves): the config
// is refused, saying how to set it, and cross_ranks_per_rack 0 gives the plain butterfly.
TEST(DsSyncSchedule, RacksWithCrossPeriodOneNeedTheLimitLifted) {
  dist::DsSyncScheduleOptions o;
  o.world_size = 8;
  o.rack_of = {0, 0, 0, 0, 1, 1, 1, 1};
  for (const char* type : {"butterfly", "random"}) {
    o.type = type;
    try {
      dist::DsSyncSchedule s(o);
      ADD_FAILURE() << type << ": racks with cross_period 1 and a crossing limit accepted:\n" << s.describe();
    } catch (const core::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cross_period: 2 or more"), std::string::npos) << what;
      EXPECT_NE(what.find("cross_ranks_per_rack: 0"), std::string::npos) << what;
    }
  }
  o.type = "butterfly";
  o.cross_ranks_per_rack = 0;
  const dist::DsSyncSchedule plain(o);
  for (int64_t t = 0; t < plain.cycle(); ++t) EXPECT_EQ(plain.at(t), make_schedule(8, 2).at(t)) << "iteration " << t;
}

TEST(DsSyncSchedule, BadOptionsAreClearErrors) {
  auto expect_error = [](dist::DsSyncScheduleOptions o, const std::string& needle) {
    try {
      dist::DsSyncSchedule s(o);
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const core::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  dist::DsSyncScheduleOptions o;
  o.world_size = 4;
  auto bad = o;
  bad.group_size = 1;
  expect_error(bad, "dist.dssync.group_size");
  bad = o;
  bad.type = "ring";
  expect_error(bad, "dist.dssync.schedule");
  bad = o;
  bad.rack_of = {0, 1};
  expect_error(bad, "dist.dssync.rack");
  bad = o;
  bad.cross_period = 0;
  expect_error(bad, "dist.dssync.cross_period");
  bad = o;
  bad.cross_ranks_per_rack = -1;
  expect_error(bad, "dist.dssync.cross_ranks_per_rack");
  bad = o;
  bad.type = "random";
  bad.rack_of = {0, 0, 1, 1};
  bad.cross_period = 2;
  expect_error(bad, "dist.dssync.cross_period");
  bad.cross_period = 1;  // racks with the random schedule: only without period and limit
  bad.cross_ranks_per_rack = 0;
  EXPECT_NO_THROW(dist::DsSyncSchedule{bad});
  bad = o;
  bad.type = "random";
  bad.pool_size = 0;
  expect_error(bad, "dist.dssync.pool_size");
}

// ---- The synchronizer over Gloo, ranks as forked processes ----

namespace {

constexpr int64_t kImage = 4;
constexpr int64_t kClasses = 3;

std::shared_ptr<layers::Module> tiny_mlp(uint64_t seed) {
  return mt::testing::tiny_mlp(seed, kImage, kClasses);
}

std::pair<Tensor, Tensor> batch(int step, int rank, int64_t rows = 8) {
  core::Generator gen(1000 + 31 * step + rank);
  Tensor x = Tensor::empty({rows, 1, kImage, kImage});
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = gen.uniform() * 2.0f - 1.0f;
  std::vector<int64_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) y[i] = (i * 7 + step + rank) % kClasses;
  return {x, Tensor::from_vector(y, {rows})};
}

std::unique_ptr<optim::StepGuard> sgd(const layers::Module& m, double lr) {
  optim::OptimizerOptions o;
  o.lr = lr;
  o.momentum = 0.9;
  return mt::testing::guarded(optim::build_optimizer("sgd", m.parameters(), o));
}

std::vector<float> flat_weights(const layers::Module& m) {
  std::vector<float> w;
  for (const auto& p : m.parameters()) {
    const auto v = p.to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

dist::DsSyncOptions options(const std::string& type = "butterfly", int g = 2) {
  dist::DsSyncOptions o;
  o.schedule.type = type;
  o.schedule.group_size = g;
  o.schedule.seed = 3;
  o.config_text = "same config";
  return o;
}

void train_steps(dist::DsSyncSynchronizer& sync, layers::Module& model, optim::StepGuard& opt,
                 int rank, int steps) {
  for (int it = 0; it < steps; ++it) {
    sync.begin_iteration(it);
    auto [x, y] = batch(it, rank);
    core::cross_entropy(model.forward(x), y).backward();
    mt::testing::step(sync, opt);
    opt.zero_grad();
  }
}

}  // namespace

// Equal weights and lr 0: nothing changes, and yet every step averaged this rank's weights in
// its group of the schedule (a counting group sees the allreduces there), so a synchronizer that
// skipped the exchange fails here.
TEST(DsSyncGloo, EqualWeightsAndZeroLearningRateChangeNothing) {
  const auto result = mt::testing::run_ranks(4, [](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    auto model = tiny_mlp(7 + c.rank);  // the start-up broadcast makes them rank 0's
    auto opt = sgd(*model, 0.0);
    auto tally = std::make_shared<mt::testing::Tally>();
    auto world = std::make_shared<mt::testing::CountingGroup>(c.group, mt::testing::world_members(4), tally);
    dist::DsSyncSynchronizer sync(world, options());
    sync.setup(*model, *opt);
    const auto start = flat_weights(*tiny_mlp(7));
    EXPECT_EQ(flat_weights(*model), start);
    train_steps(sync, *model, *opt, c.rank, 5);
    EXPECT_EQ(flat_weights(*model), start);  // averages of equal values (sizes 2: exact)
    std::map<std::string, int> steps_in;  // "allreduce {0,1}" -> the steps this rank averaged there
    for (int t = 0; t < 5; ++t)
      ++steps_in["allreduce {" + mt::testing::join_ranks(sync.schedule().group_of(t, c.rank)) + "}"];
    ASSERT_EQ(steps_in.size(), 2u);  // the butterfly's two pair phases
    for (const auto& [key, steps] : steps_in) EXPECT_EQ(tally->of(key), steps) << key;
    EXPECT_EQ(sync.measure_spread(), 0.0);
    EXPECT_EQ(sync.steps(), 5);
  });
  EXPECT_TRUE(result.ok_or_report());
}

// Rank r starts from seed 7 + r; with lr 0 only the averaging acts, so after T iterations rank
// r holds sum_j P[r][j] w_j with P the product of the schedule's mixing matrices: the measured
// weights and spread must match that prediction.
TEST(DsSyncGloo, DifferentWeightsConvergeToTheAverageAsTheMixingMatricesPredict) {
  struct Case {
    int n, g;
    std::string type;
  };
  for (const Case& k : {Case{4, 2, "butterfly"}, Case{3, 2, "butterfly"}, Case{6, 2, "butterfly"},
                        Case{5, 2, "random"}}) {
    const auto result = mt::testing::run_ranks(k.n, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      auto model = tiny_mlp(7 + c.rank);
      auto opt = sgd(*model, 0.0);
      auto o = options(k.type, k.g);
      o.broadcast_initial_weights = false;
      dist::DsSyncSynchronizer sync(c.group, o);
      sync.setup(*model, *opt);
      std::vector<std::vector<float>> w0;
      for (int j = 0; j < k.n; ++j) w0.push_back(flat_weights(*tiny_mlp(7 + j)));
      const size_t P = w0[0].size();
      // Predicted spread: RMS over ranks of ||x_r - mean||.
      auto predicted = [&](const Matrix& m, std::vector<float>* mine) {
        std::vector<std::vector<double>> x(k.n, std::vector<double>(P, 0.0));
        for (int r = 0; r < k.n; ++r)
          for (int j = 0; j < k.n; ++j)
            for (size_t i = 0; i < P; ++i) x[r][i] += m[r][j] * w0[j][i];
        double d2 = 0.0;
        for (size_t i = 0; i < P; ++i) {
          double mean = 0.0;
          for (int r = 0; r < k.n; ++r) mean += x[r][i] / k.n;
          for (int r = 0; r < k.n; ++r) d2 += (x[r][i] - mean) * (x[r][i] - mean);
        }
        if (mine) mine->assign(x[c.rank].begin(), x[c.rank].end());
        return std::sqrt(d2 / k.n);
      };
      const double spread0 = sync.measure_spread();
      EXPECT_NEAR(spread0, predicted(identity(k.n), nullptr), 1e-4 * spread0);
      double previous = spread0;
      for (int t = 1; t <= 8; ++t) {
        train_steps(sync, *model, *opt, c.rank, 1);
        std::vector<float> expect;
        const double want = predicted(product(sync.schedule(), 0, t), &expect);
        const double got = sync.measure_spread();
        EXPECT_NEAR(got, want, 1e-4 * spread0 + 1e-6) << k.n << " ranks " << k.type << ", iteration " << t;
        EXPECT_LE(got, previous * (1 + 1e-5) + 1e-6) << "averaging never increases the spread";
        previous = got;
        const auto w = flat_weights(*model);
        for (size_t i = 0; i < P; ++i) ASSERT_NEAR(w[i], expect[i], 1e-5) << "weight " << i << ", iteration " << t;
      }
      if (k.type == "butterfly" && k.n == 4) {
        EXPECT_LT(previous, 1e-5 * spread0) << "the butterfly on 4 ranks averages exactly in 2 iterations";
      }
      EXPECT_LT(previous, 0.2 * spread0);
    });
    EXPECT_TRUE(result.ok_or_report()) << k.n << " ranks " << k.type;
  }
}

TEST(DsSyncGloo, EvaluationSeesTheAverageAndTrainingGoesOnFromTheLocalWeights) {
  const auto result = mt::testing::run_ranks(2, [](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    auto model = tiny_mlp(7 + c.rank);
    auto opt = sgd(*model, 0.1);
    auto o = options();
    o.broadcast_initial_weights = false;
    o.global_average_every = 0;
    dist::DsSyncSynchronizer sync(c.group, o);
    sync.setup(*model, *opt);
    // Different starting weights (no broadcast): the evaluated model is their average, and
    // the next iteration starts again from this rank's own weights.
    const auto mine = flat_weights(*model);
    const auto a = flat_weights(*tiny_mlp(7)), b = flat_weights(*tiny_mlp(8));
    sync.prepare_eval(*model);
    const auto avg = flat_weights(*model);
    for (size_t i = 0; i < avg.size(); ++i) ASSERT_NEAR(avg[i], 0.5f * (a[i] + b[i]), 1e-6);
    sync.prepare_eval(*model);  // twice in a row (checkpoint then evaluation): still the average
    EXPECT_EQ(flat_weights(*model), avg);
    sync.begin_iteration(0);
    EXPECT_EQ(flat_weights(*model), mine) << "the local weights come back for training";
    // The schedule position survives a checkpoint.
    train_steps(sync, *model, *opt, c.rank, 3);
    dist::DsSyncSynchronizer other(c.group, o);
    other.load_state_dict(sync.state_dict());
    EXPECT_EQ(other.steps(), 3);
  });
  EXPECT_TRUE(result.ok_or_report());
}

TEST(DsSyncGloo, GlobalAveragingEveryKIterationsEqualizesTheReplicas) {
  const auto result = mt::testing::run_ranks(4, [](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    auto model = tiny_mlp(7 + c.rank);
    auto opt = sgd(*model, 0.0);
    auto o = options();
    o.broadcast_initial_weights = false;
    o.global_average_every = 1;  // every iteration: the whole world averages at once
    dist::DsSyncSynchronizer sync(c.group, o);
    sync.setup(*model, *opt);
    EXPECT_GT(sync.measure_spread(), 0.0);
    train_steps(sync, *model, *opt, c.rank, 1);
    EXPECT_LT(sync.measure_spread(), 1e-6);
  });
  EXPECT_TRUE(result.ok_or_report());
}

TEST(DsSyncGloo, FactoryRejectsBadConfigWithTheFieldName) {
  const auto result = mt::testing::run_ranks(2, [](mt::testing::RankContext& c) {
    auto expect_error = [&](mintrain::DistConfig dc, const std::string& needle) {
      mintrain::RunConfig run;
      *run.mutable_dist() = dc;
      run.mutable_dist()->set_algorithm("dssync");
      try {
        dist::make_synchronizer(c.group, run);
        ADD_FAILURE() << "no error; expected one mentioning " << needle;
      } catch (const core::Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    mintrain::DistConfig sc;
    sc.mutable_dssync()->set_group_size(0);
    expect_error(sc, "dist.dssync.group_size");
    sc = {};
    sc.mutable_dssync()->add_rack(0);
    sc.mutable_dssync()->add_rack(1);
    sc.mutable_dssync()->set_ranks_per_rack(1);
    expect_error(sc, "dist.dssync.ranks_per_rack");
    sc = {};
    for (int r : {0, 1, 2}) sc.mutable_dssync()->add_rack(r);
    expect_error(sc, "dist.dssync.rack");
    sc = {};
    sc.mutable_dssync()->set_global_average_every(-1);
    expect_error(sc, "dist.dssync.global_average_every");
    sc = {};
    sc.mutable_dssync()->set_schedule("shuffle");
    expect_error(sc, "dist.dssync.schedule");
    mintrain::RunConfig run;
    run.mutable_dist()->set_algorithm("dssync");
    EXPECT_EQ(dist::make_synchronizer(c.group, run)->name(), "dssync/butterfly");
  });
  EXPECT_TRUE(result.ok_or_report());
}

TEST(DsSyncGloo, TrainerLearnsOnFourRanks) {
  const fs::path dir = fs::temp_directory_path() / ("mt_dssync_trainer_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  const auto result = mt::testing::run_ranks(4, [&](mt::testing::RankContext& c) {
    std::ostringstream log;
    auto tally = std::make_shared<mt::testing::Tally>();
    auto world = std::make_shared<mt::testing::CountingGroup>(c.group, mt::testing::world_members(4), tally);
    const double acc = mt::testing::train_synthetic_mlp(
        world, c.rank, dir.string(),
        {"dist.algorithm=dssync", "dist.dssync.spread_every=32", "dist.timeline_file=trace-{rank}.json"},
        log);
    EXPECT_GT(acc, 60.0) << log.str();  // chance is 1/classes = 10%
    // What S-SGD would not do, in 96 steps: average in pairs, not over the world, every step.
    EXPECT_LT(tally->of("allreduce {0,1,2,3}"), 48);
    EXPECT_GE(tally->all_of("allreduce") - tally->of("allreduce {0,1,2,3}"), 96);
    if (c.rank == 0) {
      EXPECT_NE(log.str().find("DS-Sync schedule: butterfly"), std::string::npos) << log.str();
      // ... and the replicas differ between the averages.
      const std::string spread = "model spread (RMS distance to the average) ";
      const size_t at = log.str().find(spread);
      ASSERT_NE(at, std::string::npos) << log.str();
      EXPECT_GT(std::stod(log.str().substr(at + spread.size())), 0.0) << log.str();
      EXPECT_NE(log.str().find("dssync/butterfly"), std::string::npos) << log.str();
    }
  }, mo);
  EXPECT_TRUE(result.ok_or_report());
  std::ifstream trace(dir / "trace-3.json");
  std::stringstream text;
  text << trace.rdbuf();
  EXPECT_NE(text.str().find("group {"), std::string::npos) << "the timeline shows each iteration's group";
  fs::remove_all(dir);
}

// ---- Topology measured at start-up ----

TEST(DsSyncTopology, RacksFromTimesGroupsTheFastPairs) {
  // Ranks {0,2} and {1,3} share racks: 1 ms inside, 20 ms across.
  std::vector<std::vector<double>> s(4, std::vector<double>(4, 0.020));
  s[0][2] = s[2][0] = s[1][3] = s[3][1] = 0.001;
  EXPECT_EQ(dist::racks_from_times(s), (std::vector<int>{0, 1, 0, 1}));
  // Everything within 4x: one rack.
  std::vector<std::vector<double>> flat(4, std::vector<double>(4, 0.002));
  flat[0][1] = flat[1][0] = 0.001;
  EXPECT_EQ(dist::racks_from_times(flat), (std::vector<int>(4, 0)));
}

TEST(DsSyncTopology, MeasuredRacksAgreeOnEveryRankAndFeedTheSchedule) {
  const auto result = mt::testing::run_ranks(3, [](mt::testing::RankContext& c) {
    core::set_num_threads(1);
    dist::TopologyProbe probe;
    probe.message_floats = 1024;
    probe.repetitions = 2;
    const auto racks = dist::measure_racks(*c.group, probe);
    ASSERT_EQ(racks.size(), 3u);
    // Every rank must hold the same answer: compare with rank 0's by an allreduce of max - min.
    Tensor mine = Tensor::from_vector(std::vector<float>(racks.begin(), racks.end()), {3});
    Tensor mx = mine.clone(), mn = mine.clone();
    c.group->allreduce(mx, dist::ReduceOp::Max)->wait();
    c.group->allreduce(mn, dist::ReduceOp::Min)->wait();
    EXPECT_EQ(mx.to_vector(), mn.to_vector());
    // And the synchronizer accepts the option (loopback: usually one rack).
    auto model = tiny_mlp(7);
    auto opt = sgd(*model, 0.0);
    auto o = options();
    o.measure_racks = true;
    o.schedule.cross_period = 2;
    dist::DsSyncSynchronizer sync(c.group, o);
    sync.setup(*model, *opt);
    train_steps(sync, *model, *opt, c.rank, 3);
    EXPECT_EQ(sync.schedule().options().rack_of.size(), 3u);
  });
  EXPECT_TRUE(result.ok_or_report());
}

namespace {

// The world, recording every subgroup it hands out (weakly, so a released one can go) and every
// release.
class SubgroupRecorder final : public dist::ProcessGroup {
 public:
  explicit SubgroupRecorder(std::shared_ptr<dist::ProcessGroup> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  std::string describe() const override { return inner_->describe(); }
  std::shared_ptr<dist::Work> allreduce(Tensor& t, dist::ReduceOp op) override { return inner_->allreduce(t, op); }
  std::shared_ptr<dist::Work> broadcast(Tensor& t, int root) override { return inner_->broadcast(t, root); }
  std::shared_ptr<dist::Work> allgather(const Tensor& in, Tensor& out) override { return inner_->allgather(in, out); }
  std::shared_ptr<dist::Work> allgatherv(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    return inner_->allgatherv(in, out, counts);
  }
  std::shared_ptr<dist::Work> reduce_scatter(const Tensor& in, Tensor& out) override {
    return inner_->reduce_scatter(in, out);
  }
  void barrier() override { inner_->barrier(); }
  std::shared_ptr<dist::ProcessGroup> subgroup(const std::vector<int>& ranks) override {
    auto g = inner_->subgroup(ranks);
    made.push_back(g);
    return g;
  }
  void release_subgroup(const std::vector<int>& ranks) override {
    released.push_back(ranks);
    inner_->release_subgroup(ranks);
  }
  std::vector<std::weak_ptr<dist::ProcessGroup>> made;
  std::vector<std::vector<int>> released;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

}  // namespace

// The probe makes one communicator per pair of ranks (this rank's N-1 of them) and releases
// each when its pair is timed: afterwards none of them is alive. A pair asked for again after
// the probe connects anew under fresh store keys and works.
TEST(DsSyncTopology, TheProbeFreesItsPairCommunicators) {
  const auto result = mt::testing::run_ranks(4, [](mt::testing::RankContext& c) {
    auto world = std::make_shared<SubgroupRecorder>(c.group);
    dist::TopologyProbe probe;
    probe.message_floats = 256;
    probe.repetitions = 1;
    const auto racks = dist::measure_racks(*world, probe);
    EXPECT_EQ(racks.size(), 4u);
    EXPECT_EQ(world->made.size(), 3u);
    EXPECT_EQ(world->released.size(), 3u);
    for (const auto& g : world->made) EXPECT_TRUE(g.expired()) << "a pair communicator outlived the probe";
    // Ranks {0,1} and {2,3} connect again and sum.
    auto pair = world->subgroup(c.rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    Tensor t = Tensor::full({4}, static_cast<float>(c.rank));
    pair->allreduce(t)->wait();
    EXPECT_EQ(t.to_vector()[0], c.rank < 2 ? 1.0f : 5.0f);
  });
  EXPECT_TRUE(result.ok_or_report());
}

namespace {

// One parameter vector w; its gradient is set by hand.
class VectorModel : public layers::Module {
 public:
  explicit VectorModel(std::vector<float> init) {
    w_ = register_parameter("w", core::Tensor::from_vector(init, {static_cast<int64_t>(init.size())}));
  }
  core::Tensor forward(const core::Tensor&) override { return w_; }
  std::string type_name() const override { return "VectorModel"; }
  core::Tensor w_;
};

}  // namespace

// DS-Sync with a learning rate, two iterations on 4 ranks computed by hand. Rank r's loss is
// s_r/2 (w - c_r)^2 (curvatures differ, so the result is not S-SGD's), plain SGD at lr a:
//   iteration 0, groups {0,1} {2,3}:  y_r = w0 - a s_r (w0 - c_r);  x_0 = x_1 = (y_0 + y_1)/2,
//                                      x_2 = x_3 = (y_2 + y_3)/2
//   iteration 1, groups {0,2} {1,3}:  z_r = x_r - a s_r (x_r - c_r); w_0 = w_2 = (z_0 + z_2)/2,
//                                      w_1 = w_3 = (z_1 + z_3)/2
TEST(DsSyncGloo, TwoStepsWithALearningRateMatchTheHandComputedReference) {
  const double a = 0.25, w0 = 2.0;
  auto s = [](int r) { return 1.0 + 0.5 * r; };
  auto c = [](int r) { return -1.0 + r; };
  double y[4], x[4], z[4], w[4];
  for (int r = 0; r < 4; ++r) y[r] = w0 - a * s(r) * (w0 - c(r));
  x[0] = x[1] = (y[0] + y[1]) / 2;
  x[2] = x[3] = (y[2] + y[3]) / 2;
  for (int r = 0; r < 4; ++r) z[r] = x[r] - a * s(r) * (x[r] - c(r));
  w[0] = w[2] = (z[0] + z[2]) / 2;
  w[1] = w[3] = (z[1] + z[3]) / 2;
  const auto result = mt::testing::run_ranks(4, [&](mt::testing::RankContext& ctx) {
    VectorModel model({static_cast<float>(w0)});
    optim::OptimizerOptions oo;
    oo.lr = a;
    auto opt = mt::testing::guarded(optim::build_optimizer("sgd", model.parameters(), oo));
    dist::DsSyncSynchronizer sync(ctx.group, options());
    sync.setup(model, *opt);
    // The groups the reference assumes.
    EXPECT_EQ(sync.schedule().at(0), (dist::Partition{{0, 1}, {2, 3}}));
    EXPECT_EQ(sync.schedule().at(1), (dist::Partition{{0, 2}, {1, 3}}));
    for (int t = 0; t < 2; ++t) {
      sync.begin_iteration(t);
      const float v = model.w_.to_vector()[0];
      core::Tensor(model.w_).set_grad(
          core::Tensor::from_vector(std::vector<float>{static_cast<float>(s(ctx.rank) * (v - c(ctx.rank)))}, {1}));
      mt::testing::step(sync, *opt);
      opt->zero_grad();
      EXPECT_NEAR(model.w_.to_vector()[0], t == 0 ? x[ctx.rank] : w[ctx.rank], 1e-6)
          << "rank " << ctx.rank << " iteration " << t;
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// Limited crossing in the synchronizer, 8 ranks in two racks of 4 over Gloo, with a learning
// rate: rank r's loss is s_r/2 (w - c_r)^2, plain SGD; every iteration each rank steps on its
// own gradient, then averages in its group of the hand-written schedule above. The weights
// match that reference after every iteration, and the synchronizer's own count says one rank of
// each rack crossed in each crossing (odd) iteration and none otherwise.
TEST(DsSyncGloo, LimitedCrossingCountsOneFlowPerRackAndStaysExact) {
  constexpr int kRanks = 8, kIters = 8;
  const double a = 0.25, w0 = 2.0;
  auto s = [](int r) { return 1.0 + 0.25 * r; };
  auto c = [](int r) { return -2.0 + r; };
  const auto parts = limited_crossing_by_hand();
  std::vector<std::vector<double>> reference;  // [iteration][rank], after the averaging
  std::vector<double> w(kRanks, w0);
  for (int t = 0; t < kIters; ++t) {
    for (int r = 0; r < kRanks; ++r) w[r] -= a * s(r) * (w[r] - c(r));
    std::vector<double> next = w;
    for (const auto& g : parts[static_cast<size_t>(t)]) {
      double sum = 0.0;
      for (int r : g) sum += w[r];
      for (int r : g) next[r] = sum / static_cast<double>(g.size());
    }
    w = next;
    reference.push_back(w);
  }
  const auto result = mt::testing::run_ranks(kRanks, [&](mt::testing::RankContext& ctx) {
    VectorModel model({static_cast<float>(w0)});
    optim::OptimizerOptions oo;
    oo.lr = a;
    auto opt = mt::testing::guarded(optim::build_optimizer("sgd", model.parameters(), oo));
    auto o = options();
    o.schedule.cross_period = 2;
    o.schedule.rack_of = {0, 0, 0, 0, 1, 1, 1, 1};
    dist::DsSyncSynchronizer sync(ctx.group, o);
    sync.setup(model, *opt);
    for (int t = 0; t < kIters; ++t) {
      sync.begin_iteration(t);
      const float v = model.w_.to_vector()[0];
      core::Tensor(model.w_).set_grad(
          core::Tensor::from_vector(std::vector<float>{static_cast<float>(s(ctx.rank) * (v - c(ctx.rank)))}, {1}));
      mt::testing::step(sync, *opt);
      opt->zero_grad();
      EXPECT_NEAR(model.w_.to_vector()[0], reference[t][ctx.rank], 1e-5) << "rank " << ctx.rank << " iteration " << t;
      // Every rank's count of this step, gathered: the ranks of each rack that crossed.
      Tensor mine = Tensor::from_vector(std::vector<float>{sync.crossed_last_step() ? 1.0f : 0.0f}, {1});
      Tensor all = Tensor::empty({kRanks});
      ctx.group->allgather(mine, all)->wait();
      const auto crossed = all.to_vector();
      for (int rack = 0; rack < 2; ++rack) {
        float n = 0.0f;
        for (int r = 4 * rack; r < 4 * rack + 4; ++r) n += crossed[r];
        EXPECT_EQ(n, t % 2 == 1 ? 1.0f : 0.0f) << "rack " << rack << ", iteration " << t;
      }
    }
    // Ranks 0..3 of rack 0 (and 4..7) each represented their rack once per cycle of 8.
    EXPECT_EQ(sync.crossing_steps(), 1) << "rank " << ctx.rank;
  });
  EXPECT_TRUE(result.ok_or_report());
}
