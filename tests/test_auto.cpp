// dist.algorithm "auto" (dist/auto/): the decision on known tables (fastest measured wins, ties
// to the better prediction), drift that fires once under lasting contention, candidates ranked
// by the cost model with lossy ones refused, and on loopback ranks a run through every
// candidate that keeps the weights identical on every rank and equal to plain SGD on the global
// batch, with every rank taking the same decisions although their own timings differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/ops/nn.h"
#include "dist/auto/auto_synchronizer.h"
#include "dist/auto/candidates.h"
#include "dist/auto/decision.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

namespace mt {
namespace {

using core::Tensor;
namespace fs = std::filesystem;

TEST(AutoDecision, FastestMeasuredWinsTiesGoToTheBetterPrediction) {
  EXPECT_EQ(dist::fastest({0.30, 0.20, 0.25}), 1u);
  EXPECT_EQ(dist::fastest({0.30, 0.20, 0.20}), 1u);  // listed best predicted first
  EXPECT_EQ(dist::fastest({-1.0, 0.50, 0.40}), 2u);  // -1: not tried, never chosen
  const std::string e = mt::testing::error_of([] { dist::fastest({-1.0, -1.0}); });
  EXPECT_TRUE(mt::testing::contains(e, "no candidate was measured")) << e;
}

TEST(AutoDecision, DriftFiresOnceUnderLastingContentionNotInALoop) {
  dist::DriftWatch drift(/*share=*/0.25, /*window=*/4, /*max_fires=*/3);
  drift.rebase(0.0);  // after a decision: the first window is the reference
  auto window = [&](double seconds) {
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(drift.add(seconds));
    EXPECT_TRUE(drift.add(seconds));
    return drift.drifted(drift.window_mean());
  };
  EXPECT_FALSE(window(1.0));
  EXPECT_DOUBLE_EQ(drift.baseline(), 1.0);
  EXPECT_FALSE(window(1.2));  // within 25%
  EXPECT_TRUE(window(2.0));   // contention came: decide again ...
  drift.rebase(0.0);          // ... and the new choice's first window is the reference
  EXPECT_FALSE(window(2.0));
  EXPECT_FALSE(window(2.1));  // the contention lasts: no second decision
  EXPECT_EQ(drift.fires(), 1);
  dist::DriftWatch capped(0.25, 1, 0);
  capped.rebase(1.0);
  EXPECT_TRUE(capped.add(5.0));
  EXPECT_FALSE(capped.drifted(5.0));  // max_redecisions 0: never
}

mintrain::DistConfig dist_config(const std::vector<std::string>& candidates = {}) {
  mintrain::DistConfig d;
  d.set_algorithm("auto");
  for (const auto& c : candidates) d.mutable_auto_()->add_candidates(c);
  return d;
}

std::vector<std::string> names_of(const std::vector<dist::Candidate>& candidates) {
  std::vector<std::string> names;
  for (const auto& c : candidates) names.push_back(c.name);
  return names;
}

TEST(AutoCandidates, LosslessOnlyRacksAddHierarchicalClippingDropsByteScheduler) {
  EXPECT_EQ(names_of(dist::candidates_for(dist_config(), false, 0)),
            (std::vector<std::string>{"ssgd/bsp", "ssgd/wfbp", "ssgd/fusion", "ssgd/mgwfbp", "bytescheduler/a2a"}));
  EXPECT_EQ(names_of(dist::candidates_for(dist_config(), true, 0)).back(), "ssgd/mgwfbp");
  mintrain::DistConfig racks = dist_config();
  racks.mutable_ssgd()->set_ranks_per_rack(2);
  EXPECT_EQ(names_of(dist::candidates_for(racks, false, 0)).size(), 7u);
  EXPECT_EQ(names_of(dist::candidates_for(dist_config({"ssgd/fusion", "ssgd/bsp"}), false, 0)),
            (std::vector<std::string>{"ssgd/fusion", "ssgd/bsp"}));
  for (const char* lossy : {"cdsgd", "dssync", "local_sgd", "dlcp"}) {
    const std::string e = mt::testing::error_of([&] { dist::candidates_for(dist_config({lossy}), false, 0); });
    EXPECT_TRUE(mt::testing::contains(e, "trains differently from S-SGD")) << e;
    EXPECT_TRUE(mt::testing::contains(e, std::string("dist.algorithm \"") + lossy)) << e;
  }
  const std::string e = mt::testing::error_of([] { dist::candidates_for(dist_config({"hierarchical/fusion"}), false, 0); });
  EXPECT_TRUE(mt::testing::contains(e, "need dist.ssgd.rack or ranks_per_rack")) << e;
}

// Deciding again, the method in use is tried too, just behind the best `trials`, even when the
// model now ranks it last: a switch must be measured faster than staying.
TEST(AutoCandidates, DecidingAgainTriesTheMethodInUse) {
  std::vector<dist::Candidate> ranked;
  for (const char* name : {"a", "b", "c", "d"}) ranked.push_back({name, {}});
  EXPECT_EQ(dist::with_incumbent(ranked, 2, "d"), 3u);
  EXPECT_EQ(names_of(ranked), (std::vector<std::string>{"a", "b", "d", "c"}));
  EXPECT_EQ(dist::with_incumbent(ranked, 2, "a"), 2u) << "already tried";
  EXPECT_EQ(dist::with_incumbent(ranked, 2, ""), 2u) << "the first decision has no method in use";
  EXPECT_EQ(dist::with_incumbent(ranked, 4, "c"), 4u) << "every candidate tried";
  EXPECT_EQ(names_of(ranked), (std::vector<std::string>{"a", "b", "d", "c"}));
}

// The best of every family (S-SGD, ByteScheduler, the parameter server) is tried
// too, just behind the best `tries`.
TEST(AutoCandidates, TheBestOfEveryFamilyIsTried) {
  auto ranked = dist::candidates_for(
      dist_config({"ps/wfbp", "ps/staggered", "ps/bsp", "ssgd/fusion", "bytescheduler/a2a", "ssgd/mgwfbp"}), false, 1);
  EXPECT_EQ(dist::with_every_family(ranked, 2), 4u);
  EXPECT_EQ(names_of(ranked), (std::vector<std::string>{"ps/wfbp", "ps/staggered", "ssgd/fusion", "bytescheduler/a2a",
                                                        "ps/bsp", "ssgd/mgwfbp"}));
  EXPECT_EQ(dist::with_every_family(ranked, 3), 4u) << "ByteScheduler's best moves up; S-SGD's is in";
  EXPECT_EQ(dist::with_every_family(ranked, 4), 4u) << "every family is in";
  EXPECT_EQ(names_of(ranked)[3], "bytescheduler/a2a");
  ranked = dist::candidates_for(dist_config({"ssgd/fusion", "ssgd/mgwfbp", "ssgd/bsp"}), false, 0);
  EXPECT_EQ(dist::with_every_family(ranked, 1), 1u) << "one family";
}

// Deciding again, each prediction is scaled by what the first trials measured against it: a
// candidate's own ratio, else its family's least (the PS's schedules here), else none.
TEST(AutoCandidates, DecidingAgainThePredictionsAreScaledByTheFirstTrials) {
  std::vector<dist::Candidate> ranked;
  for (auto [name, predicted] : std::vector<std::pair<const char*, double>>{
           {"ps/wfbp", 0.5}, {"ps/staggered", 0.5}, {"ps/bsp", 0.6}, {"bytescheduler/a2a", 0.9}, {"ssgd/mgwfbp", 1.0}})
    ranked.push_back({name, {}, 2, predicted});
  dist::calibrate(ranked, {{"ps/wfbp", 3.0}, {"ps/staggered", 4.0}, {"bytescheduler/a2a", 0.5}});
  EXPECT_EQ(names_of(ranked), (std::vector<std::string>{"bytescheduler/a2a", "ssgd/mgwfbp", "ps/wfbp", "ps/bsp",
                                                        "ps/staggered"}));
  std::vector<double> predicted;
  for (const auto& c : ranked) predicted.push_back(c.predicted);
  EXPECT_EQ(predicted, (std::vector<double>{0.45, 1.0, 1.5, 0.6 * 3.0, 2.0}));
}

// Servers add the parameter server's three schedules with dist.ps's settings, and ByteScheduler
// on the servers; without servers naming one says how to start them.
TEST(AutoCandidates, ServersAddTheParameterServerSchedules) {
  mintrain::DistConfig d = dist_config();
  d.mutable_ps()->set_partition_bytes(16384);
  const auto all = dist::candidates_for(d, false, 2);
  ASSERT_EQ(all.size(), 9u);
  EXPECT_EQ(all[5].name, "bytescheduler/ps");
  EXPECT_EQ(all[5].served_partition_bytes, 128 << 10) << "ByteScheduler's own partition size on servers";
  EXPECT_EQ(all.back().served_partition_bytes, 16384);
  EXPECT_EQ(all[4].served_partition_bytes, 0) << all[4].name;
  EXPECT_EQ(dist::candidates_for(d, true, 2).size(), 7u) << "clipping: no ByteScheduler at all";
  EXPECT_EQ(names_of({all.end() - 3, all.end()}), (std::vector<std::string>{"ps/bsp", "ps/wfbp", "ps/staggered"}));
  EXPECT_EQ(all.back().dist.algorithm(), "ps");
  EXPECT_EQ(all.back().dist.ps().schedule(), "staggered");
  EXPECT_EQ(all.back().dist.ps().partition_bytes(), 16384);
  for (const char* name : {"ps/wfbp", "bytescheduler/ps"}) {
    const std::string e = mt::testing::error_of([&] { dist::candidates_for(dist_config({name}), false, 0); });
    EXPECT_TRUE(mt::testing::contains(e, "--nservers")) << e;
  }
}

// Ten equal layers; on a network where a message costs 5 ms of start-up, WFBP (one message per
// layer) is predicted slowest and S-SGD's merged schedules fastest; MG-WFBP is handed the
// measured alpha and beta and ByteScheduler a credit.
TEST(AutoCandidates, RankedByTheCostModel) {
  dist::ModelProfile profile;
  for (int i = 0; i < 10; ++i) profile.layers.push_back({"l" + std::to_string(i), 1e-3, 2e-3, 4e5});
  profile.update_seconds = 1e-3;
  dist::MeasuredNetwork network;
  network.flat = dist::LinkCost(5e-3, 1e-9);
  auto ranked = dist::candidates_for(dist_config(), false, 0);
  dist::rank_candidates(ranked, profile, network);
  for (size_t i = 1; i < ranked.size(); ++i) EXPECT_LE(ranked[i - 1].predicted, ranked[i].predicted);
  EXPECT_EQ(ranked.back().name, "ssgd/wfbp");
  EXPECT_GT(ranked.back().predicted, 10 * 5e-3);  // ten start-ups
  for (const auto& c : ranked) {
    if (c.name == "ssgd/mgwfbp") {
      EXPECT_DOUBLE_EQ(c.dist.ssgd().alpha(), 5e-3);
    }
    if (c.name == "bytescheduler/a2a") {
      EXPECT_GT(c.dist.bytescheduler().credit_bytes(), 0);
    }
  }
  // A slow allreduce and fast links to two servers: a candidate on the servers is predicted
  // fastest, WFBP-PS (pushes during backward) ahead of BSP-PS.
  network.flat = dist::LinkCost(5e-3, 1e-7);
  network.servers = {2, 2, 1e-5, 1e-9, 1e-9};
  ranked = dist::candidates_for(dist_config(), false, 2);
  dist::rank_candidates(ranked, profile, network);
  EXPECT_GT(ranked[0].served_partition_bytes, 0) << ranked[0].name;
  auto at = [&](const std::string& name) {
    return std::find_if(ranked.begin(), ranked.end(), [&](const dist::Candidate& c) { return c.name == name; });
  };
  EXPECT_LT(at("ps/wfbp"), at("ps/bsp"));
  EXPECT_LT(at("ps/bsp"), at("ssgd/bsp"));
  // ByteScheduler on the servers is priced on the servers' links.
  const double fast = at("bytescheduler/ps")->predicted;
  network.servers = {2, 2, 1e-5, 1e-7, 1e-7};
  ranked = dist::candidates_for(dist_config(), false, 2);
  dist::rank_candidates(ranked, profile, network);
  EXPECT_GT(at("bytescheduler/ps")->predicted, 2 * fast);
  EXPECT_GT(at("bytescheduler/ps")->dist.bytescheduler().credit_bytes(), 0);
}

constexpr int64_t kImage = 6, kClasses = 4, kRows = 8;

// One step of rank `rank`'s half of global batch `step`; each rank's mean loss over its half,
// averaged by the exchange, is the global batch's.
void train_step(dist::Synchronizer& sync, layers::Module& model, optim::StepGuard& opt, int step, int rank) {
  auto [x, y] = mt::testing::synthetic_batch(step, kRows, kImage, kClasses);
  const Tensor xs = x.narrow(0, rank * kRows / 2, kRows / 2).contiguous();
  const Tensor ys = y.narrow(0, rank * kRows / 2, kRows / 2).contiguous();
  core::cross_entropy(model.forward(xs), ys).backward();
  mt::testing::step(sync, opt);
  opt.zero_grad();
}

// auto times the network with MG-WFBP's sizes (to 4 MiB) but skips a size whose allreduce would
// take longer than its limit, judged from the size before it: on a slow link 4 MiB takes seconds.
TEST(AutoNetwork, Gloo_MeasurementSkipsSizesOverItsTimeLimit) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    auto tally = std::make_shared<mt::testing::Tally>();
    mt::testing::CountingGroup group(ctx.group, mt::testing::world_members(2), tally);
    auto largest = [&] { return *std::max_element(tally->allreduced.begin(), tally->allreduced.end()); };
    dist::measure_link_cost(group, core::Device::cpu(), 4 << 20, 1e-12);
    EXPECT_EQ(largest(), 2048) << "any time is over 1e-12 s: only the two smallest sizes run";
    tally->allreduced.clear();
    const dist::LinkCost all = dist::measure_link_cost(group, core::Device::cpu(), 4 << 20, 0.0);
    EXPECT_EQ(largest(), 1 << 20) << "no time limit: every size up to 4 MiB";
    EXPECT_GT(all.beta, 0.0);
  }).ok_or_report());
}

// fit_over_sizes skips a size that would take longer than the limit once, judged from the size
// before it: on a link of 1 MB/s and 1 ms a message, 512 KiB would take 0.5 s, 4 MiB 4.2 s. The
// sizes expected to take 50 ms or more run without a warm-up, and 512 KiB only twice.
TEST(AutoNetwork, ASizeIsSkippedWhenItWouldPassTheLimit) {
  std::vector<int64_t> timed;
  std::vector<int> exchanges;
  const dist::LinkCost fit = dist::fit_over_sizes(4 << 20, 1.0, [&](int64_t floats, dist::SizeTiming timing) {
    timed.push_back(floats * 4);
    exchanges.push_back(timing.exchanges());
    return 1e-3 + floats * 4 * 1e-6;
  });
  EXPECT_EQ(timed, (std::vector<int64_t>{1024, 8192, 65536, 524288}));
  EXPECT_EQ(exchanges, (std::vector<int>{6, 6, 5, 2}));
  EXPECT_NEAR(fit.alpha, 1e-3, 1e-9);
  EXPECT_NEAR(fit.beta, 1e-6, 1e-12);
}

// auto's options for the loopback runs: 2 profiled iterations, then `trials` of `trial_iters`.
dist::AutoOptions loopback_options(int trials, int trial_iters) {
  dist::AutoOptions o;
  o.config_text = "same config";
  o.profile_iters = 2;
  o.trials = trials;
  o.trial_iters = trial_iters;
  return o;
}

// Every candidate tried, then a drift window of 4 iterations twice as slow decides again, the
// trials taking turns in 3 rounds.
dist::AutoOptions turns_options(int trial_iters) {
  dist::AutoOptions o = loopback_options(/*trials=*/0, trial_iters);
  o.drift_window = 4;
  o.drift_share = 1.0;
  o.drift_trial_rounds = 3;
  return o;
}

// A trial a third of the way in and 1.5x slower than another candidate ends early: FUSION,
// slowed by 40 ms an iteration on both ranks, times 2 of its 6 iterations and does not win. The
// network is timed with no size above the whole gradient (under 8 KiB: the two smallest sizes).
TEST(Auto, Gloo_AFarSlowerTrialEndsEarly) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto tally = std::make_shared<mt::testing::Tally>();
    auto group = std::make_shared<mt::testing::CountingGroup>(ctx.group, mt::testing::world_members(2), tally);
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    const dist::AutoOptions o = loopback_options(/*trials=*/2, /*trial_iters=*/6);
    mintrain::DistConfig d = dist_config();
    for (const char* name : {"ssgd/bsp", "ssgd/fusion"}) d.mutable_auto_()->add_candidates(name);
    dist::AutoSynchronizer sync(group, d, mintrain::OptimizerConfig(), kRows / 2, o);
    sync.setup(*model, *opt);
    for (int s = 0; s < 30 && sync.decisions().empty(); ++s) {
      sync.begin_iteration(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(sync.current() == "ssgd/fusion" ? 40 : 2));
      train_step(sync, *model, *opt, s, ctx.rank);
    }
    ASSERT_EQ(sync.decisions().size(), 1u);
    const auto& d0 = sync.decisions()[0];
    const size_t fusion = std::find(d0.names.begin(), d0.names.end(), "ssgd/fusion") - d0.names.begin();
    ASSERT_LT(fusion, d0.names.size());
    EXPECT_EQ(d0.timed[fusion], 2) << "FUSION's trial was not ended early";
    EXPECT_EQ(d0.names[d0.winner], "ssgd/bsp");
    EXPECT_EQ(*std::max_element(tally->allreduced.begin(), tally->allreduced.end()), 2048);
  }).ok_or_report());
}

// The first decision tries the best of every family besides the best `trials`: the model's
// misfit differs between them. One trial, two families: one candidate of each is timed.
TEST(Auto, Gloo_TheFirstTrialsHaveEveryFamily) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    const dist::AutoOptions o = loopback_options(/*trials=*/1, /*trial_iters=*/2);
    const mintrain::DistConfig d = dist_config({"ssgd/bsp", "ssgd/fusion", "bytescheduler/a2a"});
    dist::AutoSynchronizer sync(ctx.group, d, mintrain::OptimizerConfig(), kRows / 2, o);
    sync.setup(*model, *opt);
    for (int s = 0; s < 30 && sync.decisions().empty(); ++s) {
      sync.begin_iteration(s);
      train_step(sync, *model, *opt, s, ctx.rank);
    }
    ASSERT_EQ(sync.decisions().size(), 1u);
    std::vector<std::string> families;
    const auto& d0 = sync.decisions()[0];
    for (size_t i = 0; i < d0.names.size(); ++i)
      if (d0.timed[i] > 0) families.push_back(d0.names[i].substr(0, d0.names[i].find('/')));
    std::sort(families.begin(), families.end());
    EXPECT_EQ(families, (std::vector<std::string>{"bytescheduler", "ssgd"}));
  }).ok_or_report());
}

// Two ranks try every candidate (trials 0), each iteration at least 5 ms (so that scheduling
// noise stays small against it); then contention arrives (every iteration 20 ms longer on both ranks) and auto decides again, once. Rank 1 is slower than rank 0 under
// S-SGD FUSION only, so the ranks' own timings disagree; the decisions must not. The weights
// end bit for bit as S-SGD's from the start: on two ranks every candidate's average is
// (a + b) / 2 of the same gradients, and the optimizer is the same.
TEST(Auto, Gloo_EveryCandidateTrainsAlikeAndAllRanksDecideAlike) {
  constexpr int kSteps = 90;
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    dist::AutoOptions o = loopback_options(/*trials=*/0, /*trial_iters=*/2);
    o.drift_window = 4;
    o.drift_share = 1.0;
    o.max_redecisions = 5;  // a loop would show as more than one drift decision
    mintrain::DistConfig d = dist_config();
    d.mutable_ssgd()->set_profile_iters(1);
    dist::AutoSynchronizer sync(ctx.group, d, mintrain::OptimizerConfig(), kRows / 2, o);
    sync.setup(*model, *opt);
    int contention_from = -1;
    for (int s = 0; s < kSteps; ++s) {
      sync.begin_iteration(s);
      if (ctx.rank == 1 && sync.current() == "ssgd/fusion") std::this_thread::sleep_for(std::chrono::milliseconds(4));
      if (contention_from < 0 && sync.decisions().size() == 1 && s % 8 == 0) contention_from = s;
      std::this_thread::sleep_for(std::chrono::milliseconds(contention_from >= 0 ? 25 : 5));
      train_step(sync, *model, *opt, s, ctx.rank);
    }
    ASSERT_EQ(sync.decisions().size(), 2u) << "one decision at start, one after the contention";
    const auto& first = sync.decisions()[0];
    EXPECT_EQ(first.names.size(), 5u);
    for (double m : first.measured) EXPECT_GE(m, 0.0) << "trials 0 tries every candidate";
    for (int timed : first.timed) EXPECT_EQ(timed, 2) << "the survey ends no trial early";
    EXPECT_EQ(sync.decisions()[1].reason.rfind("drift", 0), 0u) << sync.decisions()[1].reason;
    // The same decisions on both ranks: rank 0's winners, broadcast, against this rank's.
    std::vector<float> mine;
    for (const auto& decision : sync.decisions()) mine.push_back(static_cast<float>(decision.winner));
    for (const auto& decision : sync.decisions()) mine.push_back(static_cast<float>(decision.measured[decision.winner]));
    Tensor t = Tensor::from_vector(mine, {static_cast<int64_t>(mine.size())});
    ctx.group->broadcast(t, 0)->wait();
    EXPECT_EQ(t.to_vector(), mine) << "rank " << ctx.rank << " decided differently from rank 0";
    sync.prepare_eval(*model);  // ByteScheduler applies the last update before the next forward: now
    auto plain = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto plain_opt = mt::testing::reference_sgd(*plain);
    dist::SsgdOptions so;
    so.config_text = "same config";
    dist::SsgdSynchronizer ssgd(ctx.group, so);
    ssgd.setup(*plain, *plain_opt);
    for (int s = 0; s < kSteps; ++s) {
      ssgd.begin_iteration(s);
      train_step(ssgd, *plain, *plain_opt, s, ctx.rank);
    }
    EXPECT_EQ(mt::testing::weights_of(*model), mt::testing::weights_of(*plain));
    // Identical on every rank: rank 0's weights, broadcast, against this rank's.
    for (const auto& [name, tensor] : model->named_parameters()) {
      Tensor rank0 = tensor.clone();
      ctx.group->broadcast(rank0, 0)->wait();
      EXPECT_EQ(rank0.to_vector(), tensor.to_vector()) << name;
    }
  }, mo).ok_or_report());
}

// Deciding again, the trials take turns (a slice of MG-WFBP, FUSION and BSP each, then of the
// ones left), so contention that comes and goes weighs on all alike; BSP, 60 ms slower, takes no
// second turn; a candidate coming back, and the winner, go on with what they learned (MG-WFBP's
// plan is ready at once, not profiled again). FUSION is 8 ms slower an iteration (under 1.5x),
// so MG-WFBP wins both decisions; then every iteration becomes 25 ms slower, and FUSION 100 ms
// slower from its second turn of the second decision on: it takes no third, nor MG-WFBP, left
// alone. MG-WFBP's first turn there is 35 ms slower (a slow phase): 1.5x FUSION's, but the method
// in use takes every turn.
TEST(Auto, Gloo_DecidingAgainTheTrialsTakeTurns) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    const dist::AutoOptions o = turns_options(/*trial_iters=*/4);
    mintrain::DistConfig d = dist_config({"ssgd/fusion", "ssgd/mgwfbp", "ssgd/bsp"});
    d.mutable_ssgd()->set_profile_iters(1);
    dist::AutoSynchronizer sync(ctx.group, d, mintrain::OptimizerConfig(), kRows / 2, o);
    sync.setup(*model, *opt);
    auto plan_ready = [&] {
      for (const auto& [key, tensor] : sync.state_dict())
        if (key == "ssgd.progress") return tensor.contiguous().data<int64_t>()[2] == 1;
      return false;
    };
    std::vector<std::string> running;
    std::vector<bool> ready;
    int fusion_turns = 0, mgwfbp_turns = 0;  // their turns since the contention began
    for (int s = 0; s < 120 && sync.decisions().size() < 2; ++s) {
      sync.begin_iteration(s);
      running.push_back(sync.current());
      ready.push_back(plan_ready());
      const bool contention = !sync.decisions().empty() && s > sync.decisions()[0].iteration + 8;
      const std::string& now = running[s];
      if (contention && now != running[s - 1]) {
        fusion_turns += now == "ssgd/fusion";
        mgwfbp_turns += now == "ssgd/mgwfbp";
      }
      const int slower = now == "ssgd/fusion" ? (fusion_turns > 1 ? 100 : 8) : now == "ssgd/bsp" ? 60 : mgwfbp_turns == 1 ? 35 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + slower + (contention ? 25 : 0)));
      train_step(sync, *model, *opt, s, ctx.rank);
    }
    ASSERT_EQ(sync.decisions().size(), 2u);
    const auto& again = sync.decisions()[1];
    EXPECT_EQ(again.rounds, 3);
    // Slices of 1, 1 (and 2): MG-WFBP, left alone, needs no third; the drift window counts as its
    // first slice.
    for (size_t i = 0; i < again.names.size(); ++i)
      EXPECT_EQ(again.timed[i], again.names[i] == "ssgd/bsp" ? 1 : again.names[i] == "ssgd/fusion" ? 2 : 3) << again.names[i];
    EXPECT_EQ(again.names[again.winner], "ssgd/mgwfbp");
    const int64_t first = sync.decisions()[0].iteration + 2, last = again.iteration;
    int switches = 0;
    int64_t latest_return = -1;  // the first iteration of MG-WFBP's last stint in the trials
    for (int64_t s = first; s <= last; ++s) {
      if (running[s] == running[s - 1]) continue;
      ++switches;
      if (running[s] == "ssgd/mgwfbp") latest_return = s;
    }
    EXPECT_GE(switches, 3) << "one trial after another, not in turns";
    ASSERT_GT(latest_return, 0);
    EXPECT_TRUE(ready[latest_return]) << "MG-WFBP came back without its plan";
    for (int64_t s = first; s <= last; ++s)
      EXPECT_TRUE(running[s] != "ssgd/mgwfbp" || ready[s]) << "MG-WFBP, in use, began the turns without its plan";
    sync.begin_iteration(last + 1);
    EXPECT_EQ(sync.current(), "ssgd/mgwfbp");
    EXPECT_TRUE(plan_ready()) << "the winner did not go on with its plan";
  }).ok_or_report());
}

// Deciding again, the method in use takes every turn, however slow (its slices can all meet slow
// phases of contention that comes and goes): FUSION, chosen first, is 100 ms slower in every turn
// of the second decision, takes all three, and BSP wins. The drift window counts as FUSION's
// first slice.
TEST(Auto, Gloo_DecidingAgainTheMethodInUseTakesEveryTurn) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    const dist::AutoOptions o = turns_options(/*trial_iters=*/3);
    dist::AutoSynchronizer sync(ctx.group, dist_config({"ssgd/fusion", "ssgd/bsp"}), mintrain::OptimizerConfig(),
                                kRows / 2, o);
    sync.setup(*model, *opt);
    for (int s = 0; s < 120 && sync.decisions().size() < 2; ++s) {
      sync.begin_iteration(s);
      const bool contention = !sync.decisions().empty() && s > sync.decisions()[0].iteration + 8;
      const bool fusion = sync.current() == "ssgd/fusion";
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + (contention ? 25 + (fusion ? 100 : 0) : (fusion ? 0 : 30))));
      train_step(sync, *model, *opt, s, ctx.rank);
    }
    ASSERT_EQ(sync.decisions().size(), 2u);
    EXPECT_EQ(sync.decisions()[0].names[sync.decisions()[0].winner], "ssgd/fusion");
    const auto& again = sync.decisions()[1];
    for (size_t i = 0; i < again.names.size(); ++i)  // slices of one iteration
      EXPECT_EQ(again.timed[i], again.names[i] == "ssgd/fusion" ? 4 : 3) << again.names[i];
    EXPECT_EQ(again.names[again.winner], "ssgd/bsp");
  }).ok_or_report());
}

// Two workers and two parameter servers try five candidates, three of them on the servers (two
// parameter-server schedules and ByteScheduler), then contention comes and they try them again
// in turns: the servers serve each of those in turn and idle between (their log counts the
// sessions, and a session's end; a session reusing another's partition ids would hang), and
// the workers end with S-SGD's weights, as on any candidate.
TEST(Auto, Gloo_ParameterServerCandidatesServeInTurnAndTrainAlike) {
  constexpr int kWorkers = 2, kServers = 2;
  mintrain::DistConfig d = dist_config({"ssgd/bsp", "ps/wfbp", "bytescheduler/ps", "ssgd/fusion", "ps/staggered"});
  d.mutable_ps()->set_partition_bytes(64);  // several partitions a layer
  dist::AutoOptions o = loopback_options(/*trials=*/0, /*trial_iters=*/2);
  o.drift_window = 4;
  o.drift_share = 1.0;
  o.max_redecisions = 1;
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  EXPECT_TRUE(mt::testing::run_ranks(kWorkers + kServers, [&](mt::testing::RankContext& ctx) {
    if (ctx.rank >= kWorkers) {
      std::ostringstream log;
      dist::serve_auto_session({ctx.group, d, kWorkers, kServers, &log});
      const std::string text = log.str();
      size_t sessions = 0, ends = 0;
      for (size_t at = text.find("serving "); at != std::string::npos; at = text.find("serving ", at + 1)) ++sessions;
      for (size_t at = text.find("done after"); at != std::string::npos; at = text.find("done after", at + 1)) ++ends;
      EXPECT_GE(sessions, 6u) << text;  // each trial on the servers, in both decisions
      EXPECT_EQ(ends, sessions) << text;
      return;
    }
    auto workers = ctx.group->subgroup({0, 1});
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = mt::testing::reference_sgd(*model);
    int steps = 0;
    {
      dist::AutoSynchronizer sync(workers, d, mintrain::OptimizerConfig(), kRows / 2, o, ctx.group);
      sync.setup(*model, *opt);
      for (; steps < 300 && sync.decisions().size() < 2; ++steps) {
        sync.begin_iteration(steps);
        const bool contention = !sync.decisions().empty() && steps > sync.decisions()[0].iteration + 8;
        if (contention) std::this_thread::sleep_for(std::chrono::milliseconds(40));
        train_step(sync, *model, *opt, steps, ctx.rank);
      }
      ASSERT_EQ(sync.decisions().size(), 2u);
      const auto& first = sync.decisions()[0];
      for (size_t i = 0; i < first.names.size(); ++i) {
        EXPECT_GE(first.measured[i], 0.0) << first.names[i];
        EXPECT_GT(first.predicted[i], 0.0) << first.names[i];
      }
      sync.prepare_eval(*model);
    }  // worker 0 ends the servers' session
    auto plain = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto plain_opt = mt::testing::reference_sgd(*plain);
    dist::SsgdOptions so;
    so.config_text = "same config";
    dist::SsgdSynchronizer ssgd(workers, so);
    ssgd.setup(*plain, *plain_opt);
    for (int s = 0; s < steps; ++s) {
      ssgd.begin_iteration(s);
      train_step(ssgd, *plain, *plain_opt, s, ctx.rank);
    }
    EXPECT_EQ(mt::testing::weights_of(*model), mt::testing::weights_of(*plain));
  }, mo).ok_or_report());
}

// From the config alone, with racks (two of one rank): every candidate, the hierarchical ones
// too, is tried, and rank 0's log shows the ranking, the times and the choice.
TEST(Auto, Gloo_TrainerTriesEveryCandidateWithRacksAndLogsTheDecision) {
  const fs::path dir = fs::temp_directory_path() / ("mt_auto_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    std::ostringstream log0;
    mt::testing::train_synthetic_mlp(ctx.group, ctx.rank, (dir / "out").string(),
                                     {"dist.algorithm=auto", "dist.auto.profile_iters=2", "dist.auto.trial_iters=2",
                                      "dist.auto.trials=0", "dist.ssgd.ranks_per_rack=1", "epochs=1"},
                                     log0);
    if (ctx.rank == 0) {
      const std::string log = log0.str();
      EXPECT_TRUE(mt::testing::contains(log, "auto at iteration")) << log;
      EXPECT_TRUE(mt::testing::contains(log, "<- chosen")) << log;
      for (const char* name : {"hierarchical/fusion", "hierarchical/mgwfbp", "bytescheduler/a2a"})
        EXPECT_TRUE(mt::testing::contains(log, name)) << name << "\n" << log;
      EXPECT_FALSE(mt::testing::contains(log, "           -")) << "a candidate was not tried\n" << log;
      EXPECT_FALSE(mt::testing::contains(log, "dist.ssgd is set")) << log;  // auto reads it
    }
  }, mo).ok_or_report());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mt
