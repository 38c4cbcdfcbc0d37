// Communication hooks (dist/ssgd/comm_hook.h, dist/ssgd/compressing_hook.h): what travels for one S-SGD
// bucket. On real Gloo ranks forked on loopback: each hook's average of one bucket against a
// reference computed here (dense mean, float16 and bfloat16 rounding, error feedback with the compressor's
// own round trip), the residual surviving a new bucket layout; compressed S-SGD is S-SGD with the
// compressing hook on every schedule (the identity compressor gives dense S-SGD's bits, FUSION
// compresses while backward still runs, momentum correction with lossless compression is
// momentum S-SGD); bad config values; and a CUDA bucket against a CPU one (skips without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/device.h"
#include "core/error.h"
#include "core/ops/nn.h"
#include "core/precision.h"
#include "core/runtime.h"
#include "dist/ssgd/comm_hook.h"
#include "dist/ssgd/compressing_hook.h"
#include "dist/ssgd/powersgd_hook.h"
#include "dist/compress/compressor.h"
#include "dist/registry.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "optim/registry.h"
#include "support/dist_training.h"
#include "support/gradcheck.h"
#include "support/multiprocess.h"
#include "support/test_helpers.h"

using namespace mt;
using core::Tensor;
using mt::testing::state_entry;
using mt::testing::contains;
using mt::testing::error_of;

namespace {

// ---- One bucket ----

// Rank r's gradient of a bucket of two parameters (5 and 3 values) at iteration it.
std::vector<float> bucket_grad(int rank, int it) {
  std::vector<float> g(8);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = std::sin(1.3f * static_cast<float>(i) + 0.7f * static_cast<float>(rank) + 2.1f * static_cast<float>(it));
  return g;
}

// Two parameters; the bucket holds parameter 1 first, then parameter 0 (backward order).
struct OneBucket {
  std::vector<Tensor> params = {Tensor::zeros({5}), Tensor::zeros({3})};
  std::vector<std::vector<size_t>> layout = {{1, 0}};
  dist::GradBucket bucket(const std::vector<float>& flat) const {
    dist::GradBucket b;
    b.index = 0;
    b.grad = Tensor::from_vector(flat, {8});
    b.params = {params[1], params[0]};
    return b;
  }
};

std::vector<float> exchange(dist::CommHook& hook, const dist::GradBucket& b) {
  hook.send(b);
  hook.finish(b);
  return b.grad.to_vector();
}

// ---- Training a tiny MLP ----

constexpr int64_t kImage = 6, kClasses = 4;

// Rank r's batch of step t: a batch of its own.
std::pair<Tensor, Tensor> batch(int step, int rank, int64_t rows) {
  return mt::testing::synthetic_batch(100 * step + rank, rows, kImage, kClasses);
}

std::vector<float> all_weights(const layers::Module& m) {
  std::vector<float> w;
  for (const auto& p : mt::testing::weights_of(m)) w.insert(w.end(), p.begin(), p.end());
  return w;
}

std::unique_ptr<optim::StepGuard> sgd(const layers::Module& m, double momentum) {
  optim::OptimizerOptions o;
  o.lr = 0.1;
  o.momentum = momentum;
  return mt::testing::guarded(optim::build_optimizer("sgd", m.parameters(), o));
}

void train_steps(dist::Synchronizer& sync, layers::Module& model, optim::StepGuard& opt, int steps, int rank) {
  for (int it = 0; it < steps; ++it) {
    sync.begin_iteration(it);
    auto [x, y] = batch(it, rank, 8);
    core::cross_entropy(model.forward(x), y).backward();
    mt::testing::step(sync, opt);
    opt.zero_grad();
  }
}

dist::SsgdOptions ssgd_options(dist::Schedule schedule) {
  dist::SsgdOptions o;
  o.schedule = schedule;
  o.config_text = "same";
  o.profile_iters = 1;
  o.alpha = 1.0;  // MG-WFBP: a plan that does not depend on timings
  o.beta = 0.0;
  // FUSION: tiny caps, so this small model travels in several buckets.
  o.bucket_cap_mb = 600.0 / (1 << 20);
  o.first_bucket_cap_mb = 100.0 / (1 << 20);
  return o;
}

std::unique_ptr<dist::CommHook> compressing(std::shared_ptr<dist::ProcessGroup> group, const std::string& type,
                                            std::optional<dist::MomentumCorrectionOptions> momentum = std::nullopt) {
  dist::CompressingHookOptions o;
  o.compression.type = type;
  o.compression.tau = 0.05;
  o.momentum_correction = momentum;
  return dist::make_compressing_hook(std::move(group), o);
}

const std::vector<dist::Schedule> kSchedules = {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION,
                                                dist::Schedule::MGWFBP};

}  // namespace

// The default hook: the exact mean. The float16 hook: the mean within float16 rounding of each
// rank's share. Both on 3 ranks, where a wrong divisor or a missing sum shows.
TEST(CommHook, Gloo_AllreduceAndFp16HooksAverageOneBucket) {
  EXPECT_TRUE(mt::testing::run_ranks(3, [](mt::testing::RankContext& ctx) {
    OneBucket one;
    std::vector<double> mean(8, 0.0);
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < 8; ++i) mean[i] += bucket_grad(r, 0)[i] / 3.0;

    auto dense = dist::make_allreduce_hook(ctx.group);
    dense->set_layout(one.layout, one.params);
    const auto got = exchange(*dense, one.bucket(bucket_grad(ctx.rank, 0)));
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], mean[i], 1e-6) << i;
    EXPECT_TRUE(dense->exact_average());
    EXPECT_FALSE(dense->keeps_state_per_rank());

    auto half = dist::make_fp16_hook(ctx.group);
    half->set_layout(one.layout, one.params);
    const auto rounded = exchange(*half, one.bucket(bucket_grad(ctx.rank, 0)));
    bool any_rounded = false;
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_NEAR(rounded[i], mean[i], 2e-3) << i;  // 3 shares of |g|/3 < 0.34, each off by < 2^-12
      any_rounded |= rounded[i] != got[i];
    }
    EXPECT_TRUE(any_rounded) << "float16 travelled as float32?";
    EXPECT_FALSE(half->exact_average());
    EXPECT_EQ(half->name(), "fp16");
  }).ok_or_report());
}

// The bfloat16 hook: on 2 ranks each element is one sum, so its bits are known exactly: each
// share grad / 2 rounded to bfloat16, the sum rounded again; not the exact mean, and coarser than
// float16.
TEST(CommHook, Gloo_Bf16HookRoundsEachShareAndTheSum) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    OneBucket one;
    auto bf16 = dist::make_bf16_hook(ctx.group);
    bf16->set_layout(one.layout, one.params);
    EXPECT_EQ(bf16->name(), "bf16");
    EXPECT_FALSE(bf16->exact_average());
    EXPECT_FALSE(bf16->keeps_state_per_rank());
    const auto got = exchange(*bf16, one.bucket(bucket_grad(ctx.rank, 0)));
    auto fp16 = dist::make_fp16_hook(ctx.group);
    fp16->set_layout(one.layout, one.params);
    const auto half = exchange(*fp16, one.bucket(bucket_grad(ctx.rank, 0)));
    double bf16_error = 0, fp16_error = 0;
    for (size_t i = 0; i < 8; ++i) {
      const float a = bucket_grad(0, 0)[i] * 0.5f, b = bucket_grad(1, 0)[i] * 0.5f;
      EXPECT_EQ(got[i], core::round_to_bf16(core::round_to_bf16(a) + core::round_to_bf16(b))) << i;
      bf16_error += std::fabs(got[i] - (double(a) + b));
      fp16_error += std::fabs(half[i] - (double(a) + b));
    }
    EXPECT_GT(bf16_error, 0.0) << "bfloat16 travelled as float32?";
    EXPECT_GT(bf16_error, 4 * fp16_error) << "bfloat16 travelled as float16?";
  }).ok_or_report());
}

// Error feedback per bucket, against the formula: v = g + r; every rank decodes every rank's
// Q(v) and the average is their sum in rank order / N; r <- v - decode(Q(v)). Two iterations (the
// second sends g + r), the residual kept in parameter order and unchanged by a new layout.
TEST(CommHook, Gloo_CompressingHookIsErrorFeedbackPerBucket) {
  EXPECT_TRUE(mt::testing::run_ranks(3, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    for (const std::string type : {"two_bit", "sign", "topk", "fp16"}) {
      SCOPED_TRACE(type);
      dist::CompressionOptions co;
      co.type = type;
      co.tau = 0.05;
      co.topk_ratio = 0.3;
      const auto q = dist::make_compressor(co);
      OneBucket one;
      dist::CompressingHookOptions ho;
      ho.compression = co;
      auto hook = dist::make_compressing_hook(ctx.group, ho);
      hook->set_layout(one.layout, one.params);
      EXPECT_TRUE(hook->keeps_state_per_rank());
      EXPECT_FALSE(hook->exact_average());

      std::vector<Tensor> residual(3);
      for (int r = 0; r < 3; ++r) residual[r] = Tensor::zeros({8});
      for (int it = 0; it < 2; ++it) {
        Tensor sum = Tensor::zeros({8});
        for (int r = 0; r < 3; ++r) {
          Tensor v = Tensor::from_vector(bucket_grad(r, it), {8});
          v.add_(residual[r]);
          const Tensor decoded = q->decompress(q->compress(v), 8);
          sum.add_(decoded);
          residual[r] = v.clone();
          residual[r].add_(decoded, -1.0f);
        }
        sum.mul_(1.0f / 3.0f);
        const auto got = exchange(*hook, one.bucket(bucket_grad(ctx.rank, it)));
        hook->end_iteration();
        const auto want = sum.to_vector();
        if (type == "fp16") {  // summable: Gloo's ring sums the halves in its own order
          for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 2e-3) << it << " " << i;
        } else {
          EXPECT_EQ(got, want) << "iteration " << it;
        }
        // The hook's residual is in parameter order: parameter 0 is the bucket's second part.
        const auto mine = residual[ctx.rank].to_vector();
        std::vector<float> param_order(mine.begin() + 3, mine.end());
        param_order.insert(param_order.end(), mine.begin(), mine.begin() + 3);
        EXPECT_EQ(state_entry(*hook, "residual").to_vector(), param_order) << it;
      }
      const auto before = state_entry(*hook, "residual").to_vector();
      hook->set_layout({{0}, {1}}, one.params);  // FUSION's rebuild, MG-WFBP's plan
      EXPECT_EQ(state_entry(*hook, "residual").to_vector(), before);
    }
  }).ok_or_report());
}

// With the identity compressor the compressing hook sends what the dense one sends: every
// schedule ends with dense S-SGD's bits (3 ranks: the packing shows in the bits), and the same
// buckets.
TEST(CompressedSsgd, Gloo_IdentityCompressorEqualsDenseOnEverySchedule) {
  EXPECT_TRUE(mt::testing::run_ranks(3, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    for (const auto schedule : kSchedules) {
      SCOPED_TRACE(dist::schedule_name(schedule));
      auto m1 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
      auto m2 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
      auto o1 = mt::testing::reference_sgd(*m1), o2 = mt::testing::reference_sgd(*m2);
      dist::SsgdSynchronizer dense(ctx.group, ssgd_options(schedule));
      dist::SsgdSynchronizer compressed(ctx.group, ssgd_options(schedule), compressing(ctx.group, "none"));
      dense.setup(*m1, *o1);
      compressed.setup(*m2, *o2);
      train_steps(dense, *m1, *o1, 4, ctx.rank);
      train_steps(compressed, *m2, *o2, 4, ctx.rank);
      EXPECT_EQ(all_weights(*m1), all_weights(*m2));
      ASSERT_EQ(dense.buckets().size(), compressed.buckets().size());
      for (size_t b = 0; b < dense.buckets().size(); ++b)
        EXPECT_EQ(dense.buckets()[b].params(), compressed.buckets()[b].params()) << b;
      if (schedule == dist::Schedule::FUSION) {
        EXPECT_GT(compressed.buckets().size(), 1u);
      }
      EXPECT_EQ(compressed.name(), "ssgd/none");
    }
  }).ok_or_report());
}

// Gradient accumulation: the hooks fire on the last micro-batch only, compressed or not, so
// with the identity compressor two micro-batches give dense S-SGD's bits too.
TEST(CompressedSsgd, Gloo_GradientAccumulationCompressesTheSum) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    std::vector<std::vector<float>> weights;
    for (const bool compress : {false, true}) {
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = mt::testing::reference_sgd(*model);
      dist::SsgdOptions o = ssgd_options(dist::Schedule::FUSION);
      o.grad_accumulation_steps = 2;
      dist::SsgdSynchronizer sync(ctx.group, o, compress ? compressing(ctx.group, "none") : nullptr);
      sync.setup(*model, *opt);
      for (int it = 0; it < 3; ++it) {
        for (int micro = 0; micro < 2; ++micro) {
          sync.begin_iteration(it);
          auto [x, y] = batch(2 * it + micro, ctx.rank, 4);
          core::cross_entropy(model->forward(x), y).backward();
        }
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
      weights.push_back(all_weights(*model));
    }
    EXPECT_EQ(weights[0], weights[1]);
  }).ok_or_report());
}

// Moved from the old compressed S-SGD class's tests, unchanged in what they assert.
TEST(CompressedSsgd, Gloo_NoneEqualsPlainSsgd) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    auto m1 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
    auto m2 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
    auto o1 = sgd(*m1, 0.9), o2 = sgd(*m2, 0.9);
    dist::SsgdSynchronizer plain(ctx.group, ssgd_options(dist::Schedule::BSP));
    plain.setup(*m1, *o1);
    train_steps(plain, *m1, *o1, 5, ctx.rank);
    dist::SsgdSynchronizer compressed(ctx.group, ssgd_options(dist::Schedule::BSP), compressing(ctx.group, "none"));
    compressed.setup(*m2, *o2);
    train_steps(compressed, *m2, *o2, 5, ctx.rank);
    const auto w1 = all_weights(*m1), w2 = all_weights(*m2);
    ASSERT_EQ(w1.size(), w2.size());
    for (size_t i = 0; i < w1.size(); ++i) ASSERT_NEAR(w1[i], w2[i], 1e-6) << i;
  }).ok_or_report());
}

// With lossless compression, compressed S-SGD with momentum correction (velocities exchanged,
// plain SGD step) is S-SGD with momentum, up to float summation order; on FUSION too, whose
// buckets change after the first iteration (the velocities follow).
TEST(CompressedSsgd, Gloo_MomentumCorrectionWithNoneEqualsMomentumSsgd) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    for (const auto schedule : {dist::Schedule::BSP, dist::Schedule::FUSION}) {
      auto m1 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
      auto m2 = mt::testing::tiny_mlp(7 + ctx.rank, kImage, kClasses);
      auto o1 = sgd(*m1, 0.9), o2 = sgd(*m2, 0.0);  // the synchronizer takes the momentum over
      dist::SsgdSynchronizer plain(ctx.group, ssgd_options(dist::Schedule::BSP));
      plain.setup(*m1, *o1);
      train_steps(plain, *m1, *o1, 6, ctx.rank);
      dist::MomentumCorrectionOptions mo;
      mo.momentum = 0.9;
      dist::SsgdSynchronizer compressed(ctx.group, ssgd_options(schedule), compressing(ctx.group, "none", mo));
      compressed.setup(*m2, *o2);
      train_steps(compressed, *m2, *o2, 6, ctx.rank);
      EXPECT_NE(compressed.name().find("+momentum-correction"), std::string::npos);
      EXPECT_TRUE(compressed.takes_over_momentum());
      const auto w1 = all_weights(*m1), w2 = all_weights(*m2);
      ASSERT_EQ(w1.size(), w2.size());
      double max_diff = 0;
      for (size_t i = 0; i < w1.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(w1[i]) - w2[i]));
      EXPECT_LT(max_diff, 1e-5) << dist::schedule_name(schedule);
      // And it did move: momentum SGD from different starting weights (rank 0's broadcast).
      EXPECT_GT(std::fabs(double(w1[0]) - mt::testing::tiny_mlp(7, kImage, kClasses)->parameters()[0].to_vector()[0]),
                0.0);
    }
  }).ok_or_report());
}

// Compressed FUSION and WFBP send buckets while backward still runs: at the second-to-last
// gradient some buckets have already gone to the compressing hook (BSP: none, the contrast).
TEST(CompressedSsgd, Gloo_FusionCompressesBeforeBackwardEnds) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    for (const auto schedule : {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION}) {
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = sgd(*model, 0.0);
      dist::SsgdSynchronizer sync(ctx.group, ssgd_options(schedule), compressing(ctx.group, "two_bit"));
      sync.setup(*model, *opt);
      const auto launched_at_hook = mt::testing::record_launched_buckets(sync, opt->params());
      for (int it = 0; it < 2; ++it) {
        launched_at_hook->clear();
        sync.begin_iteration(it);
        auto [x, y] = batch(it, ctx.rank, 8);
        core::cross_entropy(model->forward(x), y).backward();
        ASSERT_EQ(launched_at_hook->size(), opt->params().size());
        const size_t early = (*launched_at_hook)[launched_at_hook->size() - 2];
        if (schedule == dist::Schedule::BSP) {
          EXPECT_EQ(early, 0u) << "iteration " << it;
        } else {
          EXPECT_GE(early, 1u) << dist::schedule_name(schedule) << " iteration " << it;
        }
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
      EXPECT_NE(sync.epoch_summary().find("sent per iteration"), std::string::npos);
    }
  }).ok_or_report());
}

// The float16 hook through S-SGD: close to dense S-SGD, not equal to it, and named.
TEST(CompressedSsgd, Gloo_Fp16HookTrainsCloseToDense) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    auto m1 = mt::testing::tiny_mlp(7, kImage, kClasses), m2 = mt::testing::tiny_mlp(7, kImage, kClasses);
    auto o1 = sgd(*m1, 0.9), o2 = sgd(*m2, 0.9);
    dist::SsgdSynchronizer dense(ctx.group, ssgd_options(dist::Schedule::FUSION));
    dist::SsgdSynchronizer half(ctx.group, ssgd_options(dist::Schedule::FUSION), dist::make_fp16_hook(ctx.group));
    EXPECT_EQ(half.name(), "ssgd/fp16");
    EXPECT_FALSE(half.steps_on_gradient_average());
    EXPECT_FALSE(half.keeps_state_per_rank());
    dense.setup(*m1, *o1);
    half.setup(*m2, *o2);
    train_steps(dense, *m1, *o1, 4, ctx.rank);
    train_steps(half, *m2, *o2, 4, ctx.rank);
    const auto w1 = all_weights(*m1), w2 = all_weights(*m2);
    double max_diff = 0;
    for (size_t i = 0; i < w1.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(w1[i]) - w2[i]));
    EXPECT_GT(max_diff, 0.0);
    EXPECT_LT(max_diff, 1e-3);
  }).ok_or_report());
}

// The PowerSGD hook through S-SGD (FUSION: its buckets change after the first iteration): while
// it warms up it is dense S-SGD, bit for bit; compressing, it moves the weights elsewhere.
TEST(CompressedSsgd, Gloo_PowerSgdHookIsDenseWhileItWarmsUp) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    std::vector<std::vector<float>> weights;
    for (const int64_t start_iter : {-1, 100, 1}) {  // -1: the dense hook
      auto model = mt::testing::tiny_mlp(7, kImage, kClasses);
      auto opt = sgd(*model, 0.9);
      const dist::PowerSgdOptions o{.rank = 1, .start_iter = start_iter, .min_compression_rate = 1.0};
      dist::SsgdSynchronizer sync(ctx.group, ssgd_options(dist::Schedule::FUSION),
                                  start_iter < 0 ? nullptr : dist::make_powersgd_hook(ctx.group, o));
      sync.setup(*model, *opt);
      EXPECT_EQ(sync.steps_on_gradient_average(), start_iter < 0);
      train_steps(sync, *model, *opt, 4, ctx.rank);
      weights.push_back(all_weights(*model));
    }
    EXPECT_EQ(weights[1], weights[0]);
    EXPECT_NE(weights[2], weights[0]);
  }).ok_or_report());
}

TEST(CompressedSsgd, Gloo_BadHookConfigIsAClearError) {
  EXPECT_TRUE(mt::testing::run_ranks(1, [](mt::testing::RankContext& ctx) {
    auto make = [&](const std::function<void(mintrain::DistConfig&)>& edit) {
      mintrain::RunConfig run;
      run.mutable_dist()->set_algorithm("ssgd");
      edit(*run.mutable_dist());
      return error_of([&] { dist::make_synchronizer(ctx.group, run); });
    };
    const std::string both = make([](mintrain::DistConfig& d) {
      d.mutable_ssgd()->set_hook("fp16");
      d.mutable_compressor()->set_type("two_bit");
    });
    EXPECT_TRUE(contains(both, "dist.ssgd.hook \"fp16\" and dist.compressor.type \"two_bit\"")) << both;
    const std::string unknown = make([](mintrain::DistConfig& d) { d.mutable_ssgd()->set_hook("int8"); });
    EXPECT_TRUE(contains(unknown, "dist.ssgd.hook")) << unknown;
    EXPECT_TRUE(contains(unknown, "fp16")) << unknown;  // the valid names
    EXPECT_TRUE(contains(unknown, "bf16, powersgd")) << unknown;
    const std::string rank = make([](mintrain::DistConfig& d) { d.mutable_ssgd()->mutable_powersgd()->set_rank(0); });
    EXPECT_TRUE(contains(rank, "dist.ssgd.powersgd.rank must be >= 1 (got 0)")) << rank;
    const std::string start = make([](mintrain::DistConfig& d) {
      d.mutable_ssgd()->mutable_powersgd()->set_start_iter(-1);
    });
    EXPECT_TRUE(contains(start, "dist.ssgd.powersgd.start_iter must be >= 0 (got -1)")) << start;
    const std::string rate = make([](mintrain::DistConfig& d) {
      d.mutable_ssgd()->mutable_powersgd()->set_min_compression_rate(0);
    });
    EXPECT_TRUE(contains(rate, "dist.ssgd.powersgd.min_compression_rate must be > 0")) << rate;
    // And the working ones build the synchronizer they say.
    mintrain::RunConfig run;
    run.mutable_dist()->set_algorithm("ssgd");
    run.mutable_dist()->mutable_compressor()->set_type("sign");
    EXPECT_EQ(dist::make_synchronizer(ctx.group, run)->name(), "ssgd/sign");
    run.mutable_dist()->mutable_compressor()->set_type("none");
    run.mutable_dist()->mutable_ssgd()->set_hook("bf16");
    EXPECT_EQ(dist::make_synchronizer(ctx.group, run)->name(), "ssgd/bf16");
    run.mutable_dist()->mutable_ssgd()->set_hook("powersgd");
    EXPECT_EQ(dist::make_synchronizer(ctx.group, run)->name(), "ssgd/powersgd(rank=2)");
    run.mutable_dist()->mutable_ssgd()->mutable_powersgd()->set_rank(1);
    EXPECT_EQ(dist::make_synchronizer(ctx.group, run)->name(), "ssgd/powersgd(rank=1)");
  }).ok_or_report());
}

// ---- On a GPU ----

namespace {

// A world of one rank that takes tensors on any device: the allreduce is the identity and the
// allgather a copy, so the hook's arithmetic runs on the tensors' device alone.
class SoloWork final : public dist::Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};
class SoloGroup final : public dist::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "solo"; }
  std::string describe() const override { return "one rank"; }
  std::shared_ptr<dist::Work> allreduce(Tensor&, dist::ReduceOp) override { return std::make_shared<SoloWork>(); }
  std::shared_ptr<dist::Work> broadcast(Tensor&, int) override { return std::make_shared<SoloWork>(); }
  std::shared_ptr<dist::Work> allgather(const Tensor& in, Tensor& out) override {
    out.copy_(in);
    return std::make_shared<SoloWork>();
  }
  std::shared_ptr<dist::Work> allgatherv(const Tensor&, Tensor&, const std::vector<int64_t>&) override {
    MT_FAIL("not used");
  }
  std::shared_ptr<dist::Work> reduce_scatter(const Tensor&, Tensor&) override { MT_FAIL("not used"); }
  void barrier() override {}
  std::shared_ptr<dist::ProcessGroup> subgroup(const std::vector<int>&) override { MT_FAIL("not used"); }
  void release_subgroup(const std::vector<int>&) override {}
};

}  // namespace

// A bucket on the GPU compresses with the device kernels and gives the CPU's values (the
// compressors write the same bytes on both devices), momentum correction included; the
// average and the residual stay right after a second iteration.
TEST(CommHook, Gpu_CompressingHookOnADeviceBucketMatchesTheCpu) {
  MT_REQUIRE_GPU();
  const core::Device gpu = core::Device::cuda(0);
  auto group = std::make_shared<SoloGroup>();
  for (const std::string type : {"two_bit", "sign", "topk", "fp16"}) {
    SCOPED_TRACE(type);
    dist::MomentumCorrectionOptions mo;
    mo.momentum = 0.9;
    auto on_cpu = compressing(group, type, mo), on_gpu = compressing(group, type, mo);
    OneBucket cpu_bucket, gpu_bucket;
    for (auto& p : gpu_bucket.params) p = p.to(gpu);
    on_cpu->set_layout(cpu_bucket.layout, cpu_bucket.params);
    on_gpu->set_layout(gpu_bucket.layout, gpu_bucket.params);
    for (int it = 0; it < 2; ++it) {
      const auto want = exchange(*on_cpu, cpu_bucket.bucket(bucket_grad(0, it)));
      dist::GradBucket b = gpu_bucket.bucket(bucket_grad(0, it));
      b.grad = b.grad.to(gpu);
      on_gpu->send(b);
      on_gpu->finish(b);
      EXPECT_TRUE(b.grad.device().is_cuda());
      EXPECT_EQ(b.grad.to_vector(), want) << "iteration " << it;
      on_cpu->end_iteration();
      on_gpu->end_iteration();
    }
    EXPECT_EQ(state_entry(*on_gpu, "residual").to_vector(), state_entry(*on_cpu, "residual").to_vector());
  }
}

// The 16-bit hooks on a GPU bucket write the CPU's bits; PowerSGD (an 8 x 8 matrix at rank 1,
// two iterations: the residual and Q carried on the device) the CPU's values up to the order of
// cuBLAS's sums.
TEST(CommHook, Gpu_HalfAndPowerSgdHooksOnADeviceBucketMatchTheCpu) {
  MT_REQUIRE_GPU();
  const core::Device gpu = core::Device::cuda(0);
  auto group = std::make_shared<SoloGroup>();
  const std::vector<std::function<std::unique_ptr<dist::CommHook>()>> hooks = {
      [&] { return dist::make_fp16_hook(group); }, [&] { return dist::make_bf16_hook(group); },
      [&] { return dist::make_powersgd_hook(group, {.rank = 1, .start_iter = 0}); }};
  for (const auto& make : hooks) {
    auto on_cpu = make(), on_gpu = make();
    const bool powersgd = on_cpu->name() == "powersgd(rank=1)";
    SCOPED_TRACE(on_cpu->name());
    const std::vector<Tensor> params = {Tensor::zeros({8, 8})};
    on_cpu->set_layout({{0}}, params);
    on_gpu->set_layout({{0}}, {params[0].to(gpu)});
    for (int it = 0; it < 2; ++it) {
      std::vector<float> g(64);
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.77f * float(i * i) + float(it));
      dist::GradBucket c{.index = 0, .grad = Tensor::from_vector(g, {64}), .params = params};
      dist::GradBucket d{.index = 0, .grad = c.grad.to(gpu), .params = {params[0].to(gpu)}};
      const auto want = exchange(*on_cpu, c);
      const auto got = exchange(*on_gpu, d);
      EXPECT_TRUE(d.grad.device().is_cuda());
      for (size_t i = 0; i < want.size(); ++i) {
        if (powersgd) {
          EXPECT_NEAR(got[i], want[i], 1e-5) << it << " " << i;
        } else {
          EXPECT_EQ(got[i], want[i]) << it << " " << i;
        }
      }
      on_cpu->end_iteration();
      on_gpu->end_iteration();
    }
  }
}
