// Multi-rank exact resume: a data-parallel run stopped mid-epoch and resumed from its checkpoint
// in a fresh Trainer ends with bit-identical weights and optimizer state, on every rank, to one
// that never stopped (CPU, one thread). Checked for every S-SGD schedule, CD-SGD, DS-Sync, local
// SGD, ByteScheduler (all-to-all) and DLCP's ring over real Gloo ranks on loopback (the algorithms
// with parameter servers: tests/test_cli.cpp, through `mintrain launch --nservers`), then the synchronizers' state on its own: what is restored, what
// starts afresh with a note, what is an error, and that other algorithms' checkpoints load.
//
// Why three ranks for FUSION and MG-WFBP: with two ranks every element of an allreduce is one
// sum a + b, which is exactly commutative, so how gradients are packed into messages cannot
// change a bit. With three, Gloo's ring splits a message into segments whose reductions start
// at different ranks, so an element's summation order ((a+b)+c or (b+c)+a) depends on its
// offset in the message: a resumed run that packs gradients differently (FUSION's initial
// layout for one iteration, MG-WFBP profiling again) drifts in the last bits.
#include <gtest/gtest.h>

#include <bit>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/runtime.h"
#include "core/serialize.h"
#include "dist/dssync/dssync_synchronizer.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

using namespace mt;
using core::Tensor;
using mt::testing::contains;
using mt::testing::error_of;
namespace fs = std::filesystem;

namespace {

// ---- Through the Trainer ----

// 256 synthetic images, 8 per rank per step: 16 steps per epoch on 2 ranks, 11 on 3, 8 on 4.
// Cosine schedule and weight decay so that the learning rate and the momentum state both
// matter; three layers so that FUSION's caps give several buckets.
std::vector<std::string> base_overrides() {
  return {"data.batch_size=8",         "data.synthetic.size=256",   "epochs=2",
          "model.hidden=[32,16]",      "lr_schedule.type=cosine",   "optimizer.weight_decay=1e-4",
          "data.limit_eval_batches=2", "logging.print_every_iters=0"};
}

apps::RunConfig make_config(const fs::path& out, const std::vector<std::string>& overrides) {
  apps::RunConfig c = apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/mlp_synthetic.prototxt");
  c.set_threads(1);  // bit-exact comparisons need one reduction order in the kernels
  c.set_output_dir(out.string());
  for (const auto& o : base_overrides()) apps::apply_override(c, o);
  for (const auto& o : overrides) apps::apply_override(c, o);
  apps::validate_config(c);
  return c;
}

apps::TrainerOptions trainer_options(const mt::testing::RankContext& ctx, std::ostream& log) {
  apps::TrainerOptions o;
  o.group = ctx.group;
  o.log = &log;
  o.quiet = ctx.rank != 0;
  return o;
}

// Exact equality, element bytes included; on a difference, how many elements and how far.
void expect_identical(const core::StateDict& a, const core::StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(what + " " + a[i].first);
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape());
    const Tensor x = a[i].second.contiguous(), y = b[i].second.contiguous();
    ASSERT_EQ(x.dtype(), y.dtype());
    if (std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0) continue;
    if (x.dtype() != core::DType::Float32) {
      ADD_FAILURE() << "values differ";
      continue;
    }
    const std::vector<float> xv = x.to_vector(), yv = y.to_vector();
    int64_t differ = 0;
    double worst = 0.0;
    for (size_t k = 0; k < xv.size(); ++k) {
      if (std::memcmp(&xv[k], &yv[k], sizeof(float)) == 0) continue;
      ++differ;
      worst = std::max(worst, std::abs(static_cast<double>(xv[k]) - yv[k]));
    }
    ADD_FAILURE() << differ << " of " << xv.size() << " values differ, by up to " << worst;
  }
}

// Every rank: A trains to the end; B stops after `stop_at` steps (a checkpoint, mid-epoch);
// C, a fresh Trainer, resumes from B's checkpoint and trains to the end. A and C must agree
// bit for bit on this rank's weights and optimizer state.
void check_resume_is_exact(int ranks, const std::vector<std::string>& overrides, int64_t stop_at) {
  const fs::path dir = mt::testing::make_temp_dir("mt_dist_resume");
  const fs::path a_dir = dir / "a", b_dir = dir / "b", c_dir = dir / "c";
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  const auto result = mt::testing::run_ranks(ranks, [&](mt::testing::RankContext& ctx) {
    std::ostringstream log;
    apps::Trainer a(make_config(a_dir, overrides), trainer_options(ctx, log));
    const apps::TrainResult ra = a.train();
    ASSERT_FALSE(ra.interrupted);

    apps::TrainerOptions stop = trainer_options(ctx, log);
    stop.stop_at_iteration = stop_at;
    apps::Trainer b(make_config(b_dir, overrides), stop);
    const apps::TrainResult rb = b.train();
    ASSERT_TRUE(rb.interrupted);
    ASSERT_EQ(rb.iterations, stop_at);
    ASSERT_NE(b.state().next_batch, 0) << "the stop must fall mid-epoch";

    // Rank 0 wrote the checkpoint before it entered C's constructor, whose start-up collectives
    // every rank must pass before resume() reads the file: no race.
    apps::Trainer c(make_config(c_dir, overrides), trainer_options(ctx, log));
    c.resume(b_dir.string());
    ASSERT_EQ(c.state().global_iteration, stop_at);
    const apps::TrainResult rc = c.train();
    EXPECT_FALSE(rc.interrupted);
    EXPECT_EQ(rc.iterations, ra.iterations);
    const std::string who = "rank " + std::to_string(ctx.rank);
    expect_identical(a.model().state_dict(), c.model().state_dict(), who + " model");
    expect_identical(a.optimizer().state_dict(), c.optimizer().state_dict(), who + " optimizer");
    EXPECT_DOUBLE_EQ(ra.last_eval.accuracy, rc.last_eval.accuracy) << who;
    EXPECT_FALSE(contains(log.str(), "note: the checkpoint")) << log.str();  // nothing fell back
  }, mo);
  EXPECT_TRUE(result.ok_or_report());
  fs::remove_all(dir);
}

const std::vector<std::string> kFusionSmallCaps = {"dist.ssgd.schedule=FUSION", "dist.ssgd.bucket_cap_mb=0.002",
                                                   "dist.ssgd.first_bucket_cap_mb=0.001"};
// Caps that put [fc3, fc2] and [fc1] in two messages, whose offsets change when the first
// iteration shows that weights' hooks fire before biases'.
const std::vector<std::string> kFusionTwoMessages = {"dist.ssgd.schedule=FUSION", "dist.ssgd.bucket_cap_mb=1",
                                                     "dist.ssgd.first_bucket_cap_mb=0.00267"};
// alpha = 1 s per message: every merge pays, so the plan is one message whatever the timings
// (a plan from measured timings could differ between runs A and B for reasons other than resume).
const std::vector<std::string> kMgwfbpOneMessage = {"dist.ssgd.schedule=MGWFBP", "dist.ssgd.profile_iters=3",
                                                    "dist.ssgd.alpha=1", "dist.ssgd.beta=0"};

}  // namespace

// Two ranks, as jobs usually start: the packing cannot show here (see the top), so these guard the
// rest of the multi-rank resume path (shards, learning-rate schedule, momentum, DS-Sync's state).
TEST(DistResume, Gloo_Bsp) { check_resume_is_exact(2, {"dist.ssgd.schedule=BSP"}, 21); }
TEST(DistResume, Gloo_Wfbp) { check_resume_is_exact(2, {"dist.ssgd.schedule=WFBP"}, 21); }
TEST(DistResume, Gloo_Fusion) { check_resume_is_exact(2, kFusionSmallCaps, 21); }
TEST(DistResume, Gloo_Mgwfbp) { check_resume_is_exact(2, {"dist.ssgd.schedule=MGWFBP", "dist.ssgd.profile_iters=3"}, 21); }
TEST(DistResume, Gloo_Dssync) { check_resume_is_exact(2, {"dist.algorithm=dssync"}, 21); }

// Before the fix: 1 of fc2's 16 bias values differed (one iteration packed differently).
TEST(DistResume, Gloo_FusionThreeRanks) { check_resume_is_exact(3, kFusionTwoMessages, 13); }
// Stopped after the plan (iteration 4): before the fix the resumed run sent 4 iterations in the
// profiling layout (then WFBP's).
TEST(DistResume, Gloo_MgwfbpThreeRanks) { check_resume_is_exact(3, kMgwfbpOneMessage, 13); }
// Stopped while profiling: the resumed run must finish the same profile, not start a new one.
TEST(DistResume, Gloo_MgwfbpThreeRanksMidProfile) { check_resume_is_exact(3, kMgwfbpOneMessage, 3); }
// CD-SGD: every rank's local weights, residual and velocity differ (and an exchange is in
// flight at the stop); compressed S-SGD: every rank's residual and velocity differ.
TEST(DistResume, Gloo_CdsgdTwoBit) {
  check_resume_is_exact(2, {"dist.algorithm=cdsgd", "dist.compressor.type=TWO_BIT", "dist.compressor.tau=0.05",
                            "dist.cdsgd.warmup_iters=4", "dist.cdsgd.k=3"}, 13);
}
TEST(DistResume, Gloo_CompressedSsgdTopkWithWarmUp) {
  check_resume_is_exact(2, {"dist.compressor.type=TOPK", "dist.compressor.topk_ratio=0.05", "dist.compressor.topk_warmup_iters=20"}, 13);
}
// PowerSGD: the iteration (warm-up over at 3), the shared Q and each rank's own residual.
TEST(DistResume, Gloo_SsgdPowerSgdHook) {
  check_resume_is_exact(2, {"dist.ssgd.hook=powersgd", "dist.ssgd.powersgd.rank=1", "dist.ssgd.powersgd.start_iter=3"},
                        13);
}
// Compressed FUSION on 3 ranks: per-bucket residuals and velocities, kept in parameter order,
// survive the buckets' rebuild after the first iteration and the resume's restored layout.
TEST(DistResume, Gloo_CompressedFusionTwoBitThreeRanks) {
  std::vector<std::string> o = kFusionTwoMessages;
  o.insert(o.end(), {"dist.compressor.type=TWO_BIT", "dist.compressor.tau=0.05"});
  check_resume_is_exact(3, o, 13);
}
// Groups of 2 among 4 ranks: every rank's weights differ from the average (with 2 ranks the group
// is the world and only the momentum differs); Adam's int64 step counts travel too.
TEST(DistResume, Gloo_DssyncFourRanksAdam) {
  check_resume_is_exact(4, {"dist.algorithm=dssync", "optimizer.name=adam", "optimizer.momentum=0",
                            "optimizer.lr=0.003"}, 11);
}

// Local SGD: each rank's own weights and optimizer state come back, between two averages and at
// one (where the weights agree and the momentum buffers still differ).
TEST(DistResume, Gloo_LocalSgdBetweenAverages) { check_resume_is_exact(2, {"dist.algorithm=local_sgd"}, 21); }
TEST(DistResume, Gloo_LocalSgdAtAnAverage) { check_resume_is_exact(2, {"dist.algorithm=local_sgd"}, 20); }
TEST(DistResume, Gloo_ByteSchedulerAllToAll) {
  check_resume_is_exact(2, {"dist.algorithm=bytescheduler", "dist.bytescheduler.partition_bytes=4096"}, 21);
}
TEST(DistResume, Gloo_DlcpRing) { check_resume_is_exact(2, {"dist.algorithm=dlcp"}, 21); }
// Stopped in its trials: the resumed run takes the synchronizer then in use, without trials; on
// two ranks every candidate's step is the same bit for bit, so the runs agree anyway.
TEST(DistResume, Gloo_AutoInItsTrials) {
  check_resume_is_exact(2, {"dist.algorithm=auto", "dist.auto.profile_iters=2", "dist.auto.trial_iters=3"}, 11);
}

// A checkpoint of one algorithm resumes under another: it loads, and rank 0 says what starts afresh.
TEST(DistResume, Gloo_CheckpointOfAnotherAlgorithmLoads) {
  const fs::path dir = mt::testing::make_temp_dir("mt_dist_resume_cross");
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(120);
  const auto result = mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    auto cross = [&](const std::vector<std::string>& from, const std::vector<std::string>& to,
                     const std::string& name) -> std::string {
      std::ostringstream log;
      apps::TrainerOptions stop = trainer_options(ctx, log);
      stop.stop_at_iteration = 5;
      apps::Trainer b(make_config(dir / (name + "_b"), from), stop);
      EXPECT_TRUE(b.train().interrupted);
      apps::Trainer c(make_config(dir / (name + "_c"), to), trainer_options(ctx, log));
      c.resume((dir / (name + "_b")).string());
      EXPECT_FALSE(c.train().interrupted);
      return log.str();
    };
    const std::string to_fusion = cross({"dist.algorithm=dssync"}, kFusionSmallCaps, "to_fusion");
    const std::string to_dssync = cross(kFusionSmallCaps, {"dist.algorithm=dssync"}, "to_dssync");
    if (ctx.rank == 0) {
      EXPECT_TRUE(contains(to_fusion, "note: the checkpoint holds no S-SGD bucket state"));
      // From S-SGD, whose replicas are equal: nothing to say, the model is every rank's state.
      EXPECT_FALSE(contains(to_dssync, "note: the checkpoint holds no per-rank state")) << to_dssync;
    }
  }, mo);
  EXPECT_TRUE(result.ok_or_report());
  fs::remove_all(dir);
}

// ---- The synchronizers' state on its own (one or two ranks) ----

namespace {

constexpr int64_t kImage = 8, kClasses = 10;

std::unique_ptr<optim::StepGuard> sgd(const layers::Module& m) {
  optim::OptimizerOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  return mt::testing::guarded(optim::build_optimizer("sgd", m.parameters(), o));
}

// One training iteration on data drawn from (seed, iteration).
void train_step(dist::Synchronizer& sync, layers::Module& model, optim::StepGuard& opt, int64_t it, uint64_t seed) {
  core::Generator gen(seed * 1000 + static_cast<uint64_t>(it));
  const Tensor x = core::randn({4, 1, kImage, kImage}, 0.0f, 1.0f, gen);
  sync.begin_iteration(it);
  core::sum(model.forward(x)).backward();
  mt::testing::step(sync, opt);
  opt.zero_grad();
}

std::vector<std::vector<size_t>> layout(const dist::SsgdSynchronizer& s) {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : s.buckets()) out.push_back(b.params());
  return out;
}

dist::SsgdOptions ssgd(dist::Schedule schedule, std::ostream* log) {
  dist::SsgdOptions o;
  o.schedule = schedule;
  // tiny_mlp's fc3, fc2 and fc1 gradients: 520, 816 and 4160 bytes.
  o.bucket_cap_mb = 0.002;
  o.first_bucket_cap_mb = 0.001;
  o.profile_iters = 2;
  o.alpha = 1.0;  // the plan does not depend on timings: one message
  o.beta = 0.0;
  o.log = log;
  return o;
}

// A synchronizer trained for `steps` iterations, for its state.
core::StateDict trained_state(const std::shared_ptr<dist::ProcessGroup>& group, const dist::SsgdOptions& o,
                              int steps, std::vector<std::vector<size_t>>* buckets = nullptr) {
  auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
  auto opt = sgd(*model);
  dist::SsgdSynchronizer s(group, o);
  s.setup(*model, *opt);
  for (int it = 0; it < steps; ++it) train_step(s, *model, *opt, it, 1);
  if (buckets) *buckets = layout(s);
  return s.state_dict();
}

// The state with one int64 value of one entry replaced.
core::StateDict with_value(core::StateDict state, const std::string& name, size_t index, int64_t value) {
  for (auto& [n, t] : state) {
    if (n != name) continue;
    t = t.clone();
    t.data<int64_t>()[index] = value;
    return state;
  }
  ADD_FAILURE() << "no entry " << name;
  return state;
}

void run_one_rank(const mt::testing::RankFn& fn) {
  EXPECT_TRUE(mt::testing::run_ranks(1, [&](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    fn(ctx);
  }).ok_or_report());
}

}  // namespace

TEST(DistResumeState, Gloo_FusionLayoutIsRestoredAndKept) {
  run_one_rank([](mt::testing::RankContext& ctx) {
    std::vector<std::vector<size_t>> saved;
    const core::StateDict state = trained_state(ctx.group, ssgd(dist::Schedule::FUSION, nullptr), 2, &saved);
    for (bool before_setup : {false, true}) {
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = sgd(*model);
      dist::SsgdSynchronizer s(ctx.group, ssgd(dist::Schedule::FUSION, nullptr));
      if (before_setup) s.load_state_dict(state);  // kept until setup brings the parameters
      s.setup(*model, *opt);
      if (!before_setup) {
        // The initial layout (reverse registration order) is not the rebuilt one: weights' hooks
        // fire before biases'. Otherwise this test could not fail.
        ASSERT_NE(layout(s), saved);
        s.load_state_dict(state);
      }
      EXPECT_EQ(layout(s), saved) << "before setup: " << before_setup;
      EXPECT_EQ(s.hook_order().size(), 6u);
      train_step(s, *model, *opt, 2, 1);  // no second rebuild: the layout stays
      EXPECT_EQ(layout(s), saved);
    }
  });
}

TEST(DistResumeState, Gloo_MgwfbpPlanAndProfileAreRestored) {
  run_one_rank([](mt::testing::RankContext& ctx) {
    const auto o = ssgd(dist::Schedule::MGWFBP, nullptr);
    // After the plan (warm-up + 2 profiled iterations).
    std::vector<std::vector<size_t>> planned;
    const core::StateDict after = trained_state(ctx.group, o, 4, &planned);
    ASSERT_EQ(planned.size(), 1u) << "alpha = 1 s merges everything";
    auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt = sgd(*model);
    dist::SsgdSynchronizer s(ctx.group, o);
    s.setup(*model, *opt);
    ASSERT_FALSE(s.plan_ready());
    s.load_state_dict(after);
    EXPECT_TRUE(s.plan_ready());
    EXPECT_EQ(layout(s), planned);
    EXPECT_EQ(s.profiled_backward().size(), 6u);

    // Checkpoints of older builds also hold a measured allreduce curve and a fourth cost number
    // (the share of compute lost while a message flies): training no longer models either (the
    // cost model does, dist/predict/), so they load, the plan is restored, and they are not saved
    // again.
    auto bits = [](const std::vector<double>& values) {
      std::vector<int64_t> out;
      for (double v : values) out.push_back(std::bit_cast<int64_t>(v));
      return core::Tensor::from_vector(out, {static_cast<int64_t>(out.size())});
    };
    core::StateDict with_curve = after;
    with_curve.emplace_back("ssgd.cost_curve", bits({1024, 4096, 0.001, 0.0025}));
    dist::SsgdSynchronizer s3(ctx.group, o);
    s3.setup(*model, *opt);
    s3.load_state_dict(with_curve);
    EXPECT_TRUE(s3.plan_ready());
    EXPECT_EQ(layout(s3), planned);
    for (const auto& [name, t] : s3.state_dict()) EXPECT_NE(name, "ssgd.cost_curve");

    // The cost's numbers (alpha, beta, gamma) come back; older checkpoints hold two or four.
    auto with_cost = [&](const std::vector<double>& cost) {
      core::StateDict state;
      for (const auto& [name, t] : after)
        if (name != "ssgd.cost") state.emplace_back(name, t);
      state.emplace_back("ssgd.cost", bits(cost));
      return state;
    };
    dist::SsgdSynchronizer s5(ctx.group, o);
    s5.setup(*model, *opt);
    s5.load_state_dict(with_cost({0.001, 1e-8, 0.002, 0.25}));
    EXPECT_EQ(s5.cost().alpha, 0.001);
    EXPECT_EQ(s5.cost().gamma, 0.002);
    s5.load_state_dict(with_cost({0.001, 1e-8}));
    EXPECT_EQ(s5.cost().gamma, 0.0);
    EXPECT_TRUE(contains(error_of([&] { s5.load_state_dict(with_cost({0.001, 1e-8, 0.002, 0.1, 0.2})); }),
                         "sync.ssgd.cost must hold 2 to 4 values"));

    // Mid-profile (warm-up + 1 of 2): one more iteration completes the profile and makes the plan.
    const core::StateDict mid = trained_state(ctx.group, o, 2);
    auto model2 = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto opt2 = sgd(*model2);
    dist::SsgdSynchronizer s2(ctx.group, o);
    s2.setup(*model2, *opt2);
    s2.load_state_dict(mid);
    EXPECT_FALSE(s2.plan_ready());
    EXPECT_EQ(layout(s2).size(), 1u) << "BSP (one message) while profiling";
    train_step(s2, *model2, *opt2, 2, 1);
    EXPECT_TRUE(s2.plan_ready()) << "a fresh profile would need 3 more iterations";
    EXPECT_EQ(layout(s2), planned);
  });
}

TEST(DistResumeState, Gloo_OtherSettingsStartAfreshWithANote) {
  run_one_rank([](mt::testing::RankContext& ctx) {
    const core::StateDict fusion = trained_state(ctx.group, ssgd(dist::Schedule::FUSION, nullptr), 2);
    const core::StateDict mgwfbp = trained_state(ctx.group, ssgd(dist::Schedule::MGWFBP, nullptr), 4);
    auto load_into = [&](dist::SsgdOptions o, const core::StateDict& state) {
      std::ostringstream log;
      o.log = &log;
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = sgd(*model);
      dist::SsgdSynchronizer s(ctx.group, o);
      s.setup(*model, *opt);
      const auto fresh = layout(s);
      log.str("");
      s.load_state_dict(state);
      EXPECT_EQ(layout(s), fresh) << "a fallback keeps the fresh layout";
      EXPECT_FALSE(s.plan_ready());
      return log.str();
    };
    auto caps = ssgd(dist::Schedule::FUSION, nullptr);
    caps.bucket_cap_mb = 0.004;
    EXPECT_TRUE(contains(load_into(caps, fusion), "made with dist.ssgd.bucket_cap_mb 0.002 (this run: ssgd/fusion)"));
    EXPECT_TRUE(contains(load_into(ssgd(dist::Schedule::WFBP, nullptr), fusion), "made with dist.ssgd.schedule fusion"));
    auto profile = ssgd(dist::Schedule::MGWFBP, nullptr);
    profile.profile_iters = 3;
    profile.alpha = -1;  // measured at start-up
    const std::string note = load_into(profile, mgwfbp);
    EXPECT_TRUE(contains(note, "dist.ssgd.profile_iters 2, dist.ssgd.alpha 1"));
    EXPECT_TRUE(contains(note, "starting the buckets afresh"));
    // The plan was made on 2 ranks (settings[1] is the world size).
    EXPECT_TRUE(contains(load_into(ssgd(dist::Schedule::MGWFBP, nullptr), with_value(mgwfbp, "ssgd.settings", 1, 2)),
                         "made with 2 ranks"));
  });
}

TEST(DistResumeState, Gloo_AnotherModelOrADamagedStateIsAnError) {
  run_one_rank([](mt::testing::RankContext& ctx) {
    const auto o = ssgd(dist::Schedule::FUSION, nullptr);
    const core::StateDict state = trained_state(ctx.group, o, 2);
    auto load = [&](const core::StateDict& st, int64_t hidden) {
      return error_of([&] {
        core::Generator gen(7);
        layers::ModelOptions mo;
        mo.image_size = kImage;
        mo.num_classes = kClasses;
        mo.hidden = {hidden, 12};
        auto model = layers::build_model("mlp", mo, gen);
        auto opt = sgd(*model);
        dist::SsgdSynchronizer s(ctx.group, o);
        s.setup(*model, *opt);
        s.load_state_dict(st);
      });
    };
    EXPECT_EQ(load(state, 16), "<no mt::core::Error thrown>");  // tiny_mlp's own sizes
    EXPECT_TRUE(contains(load(state, 20), "(sync.ssgd.param_numel) gives parameter 0 1024 elements, this "
                                          "model's has 1280"));
    // Layout [4 5] [2 3] [0] [1]: parameter 0 written over position 1 appears again at position 4.
    EXPECT_TRUE(contains(load(with_value(state, "ssgd.buckets", 1, 0), 16),
                         "sync.ssgd.buckets: position 4 holds parameter 0, which is out of range or appears twice"));
    EXPECT_TRUE(contains(load(with_value(state, "ssgd.format", 0, 9), 16), "sync.ssgd.format is 9"));
    core::StateDict incomplete;
    for (const auto& e : state)
      if (e.first != "ssgd.progress") incomplete.push_back(e);
    EXPECT_TRUE(contains(load(incomplete, 16), "sync.ssgd.progress is missing"));
  });
}

TEST(DistResumeState, Gloo_EmptyOrForeignStateLoads) {
  run_one_rank([](mt::testing::RankContext& ctx) {
    for (const auto& state : {core::StateDict{}, core::StateDict{{"dssync.step", Tensor::from_vector(std::vector<int64_t>{5}, {1})}}}) {
      std::ostringstream log;
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = sgd(*model);
      dist::SsgdSynchronizer s(ctx.group, ssgd(dist::Schedule::FUSION, &log));
      s.setup(*model, *opt);
      const auto fresh = layout(s);
      s.load_state_dict(state);
      EXPECT_EQ(layout(s), fresh);
      EXPECT_TRUE(contains(log.str(), "note: the checkpoint holds no S-SGD bucket state"));
      train_step(s, *model, *opt, 0, 1);  // and it trains: the usual rebuild after iteration 1
      EXPECT_NE(layout(s), fresh);
    }
  });
}

TEST(DistResumeState, Gloo_DssyncRestoresEachRanksOwnStateOrFallsBackWithANote) {
  const fs::path dir = mt::testing::make_temp_dir("mt_dist_resume_dssync");
  EXPECT_TRUE(mt::testing::run_ranks(2, [&](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    std::ostringstream log;
    dist::DsSyncOptions o;
    o.broadcast_initial_weights = false;  // different weights per rank, so "own" is visible
    o.log = &log;
    auto clone = [](core::StateDict d) {
      for (auto& e : d) e.second = e.second.clone();
      return d;
    };
    auto model = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
    auto opt = sgd(*model);
    dist::DsSyncSynchronizer s(ctx.group, o);
    s.setup(*model, *opt);
    const core::StateDict own = clone(model->state_dict());
    s.prepare_checkpoint(*model);  // collective: rank 0 receives every rank's weights
    const core::StateDict average = clone(model->state_dict());
    // What a checkpoint carries: rank 0's state, read by every rank.
    const std::string file = (dir / "sync.state").string();
    if (ctx.rank == 0) {
      core::Archive a;
      a.add("", s.state_dict());
      core::save_archive(file, a);
    } else {
      EXPECT_EQ(s.state_dict().size(), 1u) << "only rank 0 collects the ranks' states";
    }
    ctx.group->barrier();
    const core::StateDict state = core::load_archive(file).tensors;

    // A fresh run: the model loaded with the average, then the synchronizer's state.
    auto fresh = mt::testing::tiny_mlp(100, kImage, kClasses);
    auto fresh_opt = sgd(*fresh);
    dist::DsSyncSynchronizer d(ctx.group, o);
    d.setup(*fresh, *fresh_opt);
    auto load = [&](const core::StateDict& st) {
      fresh->load_state_dict(average);
      log.str("");
      d.load_state_dict(st);
      return fresh->state_dict();
    };
    expect_identical(load(state), own, "rank " + std::to_string(ctx.rank) + " own weights");
    EXPECT_EQ(log.str(), "");

    auto replaced = [&](const std::string& name, const Tensor& t) {
      core::StateDict out = state;
      for (auto& e : out)
        if (e.first == name) e.second = t;
      return out;
    };
    expect_identical(load(replaced("dssync.ranks", Tensor::from_vector(std::vector<int64_t>{3}, {1}))), average,
                     "another world size");
    if (ctx.rank == 0) {
      EXPECT_TRUE(contains(log.str(), "written by 3 ranks, this run has 2"));
    }
    core::StateDict older;
    for (const auto& e : state)
      if (e.first == "dssync.step") older.push_back(e);
    expect_identical(load(older), average, "no per-rank entries");
    if (ctx.rank == 0) {
      EXPECT_TRUE(contains(log.str(), "holds no per-rank state"));
    }
    const std::string mine = "dssync.rank" + std::to_string(ctx.rank) + ".local";
    EXPECT_TRUE(contains(error_of([&] { load(replaced(mine, Tensor::zeros({5}))); }),
                         "checkpoint entry sync." + mine + " is float32[5]"));
    // An S-SGD checkpoint's state: nothing for DS-Sync, nothing to say.
    expect_identical(load({{"ssgd.format", Tensor::from_vector(std::vector<int64_t>{1}, {1})}}), average,
                     "an S-SGD checkpoint");
    EXPECT_EQ(log.str(), "");
  }).ok_or_report());
  fs::remove_all(dir);
}
