// CD-SGD (dist/cdsgd/cdsgd_synchronizer.h) on real Gloo ranks forked on loopback: the closed form of
// the pipeline, the delay-compensation term, checkpoint/resume continuity, the trainer learning on
// 4 ranks, and bad config values. Compressed S-SGD's tests are in test_comm_hook.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/cdsgd/cdsgd_synchronizer.h"
#include "dist/registry.h"
#include "dist/comm/tcp_store.h"
#include "dist/compress/momentum_correction.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "optim/step_guard.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/gradcheck.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

// A model that is one parameter vector w (its forward is unused: tests set gradients by hand).
class VectorModel : public layers::Module {
 public:
  explicit VectorModel(std::vector<float> init) {
    w_ = register_parameter("w", Tensor::from_vector(init, {static_cast<int64_t>(init.size())}));
  }
  Tensor forward(const Tensor&) override { return w_; }
  std::string type_name() const override { return "VectorModel"; }
  Tensor w_;
};

std::unique_ptr<optim::Optimizer> sgd_of(const layers::Module& m, double lr, double momentum = 0) {
  optim::OptimizerOptions o;
  o.lr = lr;
  o.momentum = momentum;
  return optim::build_optimizer("sgd", m.parameters(), o);
}

// Inside the trainer's StepGuard, as the synchronizers get it.
std::unique_ptr<optim::StepGuard> plain_sgd(const layers::Module& m, double lr, double momentum = 0) {
  return mt::testing::guarded(sgd_of(m, lr, momentum));
}

dist::CdsgdOptions cdsgd(const std::string& compression, int warmup, int k, double lambda) {
  dist::CdsgdOptions o;
  o.compression.type = compression;
  o.compression.tau = 0.05;
  o.warmup_iters = warmup;
  o.k = k;
  o.lambda = lambda;
  o.config_text = "same";
  return o;
}

// The per-rank targets c_i of the quadratic loss f_i(w) = 1/2 |w - c_i|^2 (gradient w - c_i).
std::vector<float> target(int rank) {
  return {static_cast<float>(rank + 1), static_cast<float>(-rank), 2.0f * rank, 0.5f};
}

void set_quadratic_grad(const Tensor& w, const std::vector<float>& c) {
  auto v = w.to_vector();
  for (size_t i = 0; i < v.size(); ++i) v[i] -= c[i];
  Tensor(w).set_grad(Tensor::from_vector(v, w.shape()));
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// The closed form. NONE compression (lossless, so the residual stays 0), no warm-up, lambda = 0,
// plain SGD at rate a, rank i minimizing f_i(w) = 1/2 |w - c_i|^2 (gradient w - c_i), N ranks,
// c = mean_i c_i, d_i = c_i - c. One iteration t (from w_0 = W_0):
//   W_{t+1}    = W_t - a * mean_i (w_t^i - c_i)          (applied one step later)
//   w_{t+1}^i  = W_t - a * (w_t^i - c_i)                  (local, from the newest W)
// Averaging the second over i gives mean_i w_{t+1}^i = W_{t+1}, so with e_t = W_t - c:
//   W_t   = c + (1 - a)^t (W_0 - c)                               (exactly synchronous SGD)
//   w_t^i = W_t + a d_i (1 - (-a)^t) / (1 + a)
// (u_t = w_t^i - W_t satisfies u_{t+1} = -a u_t + a d_i, u_0 = 0). After T steps the model holds
// w_T^i; the synchronizer has applied T-1 exchanges (W_{T-1}), and prepare_eval applies the one
// in flight and shows W_T. k = 1 (every step full precision) and k = 0 (never) agree.
TEST(Cdsgd, Gloo_ClosedFormOnTwoRanks) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    const int N = 2, T = 7;
    const double a = 0.3;
    const std::vector<float> W0 = {1.0f, 2.0f, -3.0f, 4.0f};
    for (int k : {1, 0}) {
      VectorModel model(ctx.rank == 0 ? W0 : std::vector<float>{9, 9, 9, 9});  // broadcast fixes it
      auto opt = plain_sgd(model, a);
      dist::CdsgdSynchronizer sync(ctx.group, cdsgd("none", 0, k, 0.0));
      sync.setup(model, *opt);
      const auto c_i = target(ctx.rank);
      for (int t = 0; t < T; ++t) {
        sync.begin_iteration(t);
        set_quadratic_grad(model.w_, c_i);
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
      auto W_at = [&](int t, size_t j) {
        double c = 0;
        for (int r = 0; r < N; ++r) c += target(r)[j];
        c /= N;
        return c + std::pow(1 - a, t) * (W0[j] - c);
      };
      auto w_at = [&](int t, size_t j) {
        double c = 0;
        for (int r = 0; r < N; ++r) c += target(r)[j];
        c /= N;
        const double d = c_i[j] - c;
        return W_at(t, j) + a * d * (1 - std::pow(-a, t)) / (1 + a);
      };
      const auto local = model.w_.to_vector();
      for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(local[j], w_at(T, j), 1e-5) << "k " << k << " j " << j;
      const auto W_internal = sync.global_weights().to_vector();
      for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(W_internal[j], W_at(T - 1, j), 1e-5);
      sync.prepare_eval(model);
      const auto shown = model.w_.to_vector();
      for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(shown[j], W_at(T, j), 1e-5) << "k " << k;
      sync.begin_iteration(T);  // training goes on: the local weights are back
      EXPECT_EQ(model.w_.to_vector(), local);
    }
  }).ok_or_report());
}

// The delay-compensation term, checked by hand on the second delayed iteration (the first has
// w = W, where the term vanishes): w_2 = W_1 - a (g_1 + lambda g_1^2 (W_1 - w_1)).
TEST(Cdsgd, Gloo_DelayCompensationTerm) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    const double a = 0.2, lambda = 0.5;
    const std::vector<float> W0 = {1.0f, -2.0f, 0.5f, 3.0f};
    VectorModel model(W0);
    auto opt = plain_sgd(model, a);
    dist::CdsgdSynchronizer sync(ctx.group, cdsgd("none", 0, 0, lambda));
    sync.setup(model, *opt);
    const auto c_i = target(ctx.rank);
    std::vector<double> g0(4), w1(4), W1(4), g1(4);
    sync.begin_iteration(0);
    set_quadratic_grad(model.w_, c_i);
    mt::testing::step(sync, *opt);
    opt->zero_grad();
    for (size_t j = 0; j < 4; ++j) {
      g0[j] = W0[j] - c_i[j];
      w1[j] = W0[j] - a * g0[j];
      double mean_g = 0;
      for (int r = 0; r < 2; ++r) mean_g += (W0[j] - target(r)[j]) / 2.0;
      W1[j] = W0[j] - a * mean_g;
      g1[j] = w1[j] - c_i[j];
    }
    const auto got1 = model.w_.to_vector();
    for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(got1[j], w1[j], 1e-6);
    sync.begin_iteration(1);
    set_quadratic_grad(model.w_, c_i);
    mt::testing::step(sync, *opt);
    const auto got2 = model.w_.to_vector();
    for (size_t j = 0; j < 4; ++j) {
      const double want = W1[j] - a * (g1[j] + lambda * g1[j] * g1[j] * (W1[j] - w1[j]));
      EXPECT_NEAR(got2[j], want, 1e-5) << j;
    }
  }).ok_or_report());
}

// Two parameter vectors; the second gets no gradient on rank 1 in odd iterations (a branch not
// taken there). CD-SGD counts a missing gradient as zeros: the run equals one where rank 1 sets
// that gradient to zeros itself, bit for bit, local weights and W, with 2-bit compression and
// momentum correction (whose velocity and local step read the bucket's gradients and weights).
TEST(Cdsgd, Gloo_ParameterWithoutGradientCountsAsZeros) {
  class TwoVectors : public layers::Module {
   public:
    TwoVectors() {
      a_ = register_parameter("a", Tensor::from_vector(std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}, {4}));
      b_ = register_parameter("b", Tensor::from_vector(std::vector<float>{0.25f, 1.5f, -1.0f}, {3}));
    }
    Tensor forward(const Tensor&) override { return a_; }
    std::string type_name() const override { return "TwoVectors"; }
    Tensor a_, b_;
  };
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    std::vector<std::vector<float>> results[2];
    for (int missing = 0; missing < 2; ++missing) {
      TwoVectors model;
      auto opt = plain_sgd(model, 0.1);
      dist::CdsgdOptions o = cdsgd("two_bit", 1, 0, 0.5);
      dist::MomentumCorrectionOptions mc;
      mc.momentum = 0.9;
      mc.weight_decay = 0.01;  // the velocity reads the bucket's weights too
      o.momentum_correction = mc;
      dist::CdsgdSynchronizer sync(ctx.group, o);
      sync.setup(model, *opt);
      for (int t = 0; t < 6; ++t) {
        sync.begin_iteration(t);
        set_quadratic_grad(model.a_, {1.0f + ctx.rank, 0.0f, -1.0f, 2.0f});
        if (ctx.rank == 1 && t % 2 == 1) {
          if (!missing) Tensor(model.b_).set_grad(Tensor::zeros({3}));
        } else {
          set_quadratic_grad(model.b_, {-0.5f * ctx.rank, 2.0f, 0.0f});
        }
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
      results[missing] = {model.a_.to_vector(), model.b_.to_vector(), sync.global_weights().to_vector()};
    }
    EXPECT_EQ(results[1], results[0]);
  }).ok_or_report());
}

namespace {

constexpr int64_t kImage = 6, kClasses = 4;

std::shared_ptr<layers::Module> tiny_mlp(uint64_t seed) {
  return mt::testing::tiny_mlp(seed, kImage, kClasses);
}

std::pair<Tensor, Tensor> batch(int step, int rank, int64_t rows) {
  core::Generator gen(1000 + 31 * step + rank);
  Tensor x = Tensor::empty({rows, 1, kImage, kImage});
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = gen.uniform() * 2.0f - 1.0f;
  std::vector<int64_t> y(rows);
  for (int64_t i = 0; i < rows; ++i) y[i] = static_cast<int64_t>((i * 7 + step + rank) % kClasses);
  return {x, Tensor::from_vector(y, {rows})};
}

std::vector<float> all_weights(const layers::Module& m) {
  std::vector<float> w;
  for (const auto& p : m.parameters()) {
    const auto v = p.to_vector();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

void train_steps(dist::Synchronizer& sync, layers::Module& model, optim::StepGuard& opt, int from,
                 int to, int rank) {
  for (int it = from; it < to; ++it) {
    sync.begin_iteration(it);
    auto [x, y] = batch(it, rank, 8);
    core::cross_entropy(model.forward(x), y).backward();
    mt::testing::step(sync, opt);
    opt.zero_grad();
  }
}

// A checkpoint in the middle of a CD-SGD run: what the trainer saves (the model's, the
// optimizer's and the synchronizer's state, after prepare_eval).
struct SavedState {
  core::StateDict model, optim, sync;
};

// 10 iterations of CD-SGD from tiny_mlp(7). With `save`: evaluate after iteration 5 and keep
// the state there. With `resume`: start from that state instead of training the first 5.
// Returns the global weights at the end.
std::vector<float> cdsgd_run(std::shared_ptr<dist::ProcessGroup> group, int rank,
                             const dist::CdsgdOptions& options, double momentum, SavedState* save,
                             const SavedState* resume) {
  auto clone = [](core::StateDict d) {
    for (auto& [k, t] : d) t = t.clone();
    return d;
  };
  auto m = tiny_mlp(7);
  auto o = plain_sgd(*m, 0.05, momentum);
  dist::CdsgdSynchronizer s(std::move(group), options);
  s.setup(*m, *o);
  if (resume) {
    m->load_state_dict(resume->model);
    o->load_state_dict(resume->optim);
    s.load_state_dict(resume->sync);
  } else {
    train_steps(s, *m, *o, 0, 5, rank);
    if (save) {
      s.prepare_eval(*m);
      *save = {clone(m->state_dict()), clone(o->state_dict()), s.state_dict()};
    }
  }
  train_steps(s, *m, *o, 5, 10, rank);
  s.prepare_eval(*m);
  return all_weights(*m);
}

// The reference: `steps` iterations of uncompressed S-SGD BSP.
void train_ssgd_bsp(std::shared_ptr<dist::ProcessGroup> group, layers::Module& model,
                    optim::StepGuard& opt, int steps, int rank) {
  dist::SsgdOptions so;
  so.schedule = dist::Schedule::BSP;
  so.config_text = "same";
  dist::SsgdSynchronizer plain(std::move(group), so);
  plain.setup(model, opt);
  train_steps(plain, model, opt, 0, steps, rank);
}

}  // namespace

// A checkpoint in the middle (prepare_eval, then the model's, optimizer's and synchronizer's
// state) resumes exactly: the resumed run ends with the same global weights as the one that
// went on, and evaluating in between does not change the training.
TEST(Cdsgd, Gloo_CheckpointResumesExactly) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    for (const std::string comp : {"two_bit", "topk", "sign"}) {
      SavedState saved;
      const auto straight = cdsgd_run(ctx.group, ctx.rank, cdsgd(comp, 2, 3, 0.04), 0.9, nullptr, nullptr);
      const auto with_eval = cdsgd_run(ctx.group, ctx.rank, cdsgd(comp, 2, 3, 0.04), 0.9, &saved, nullptr);
      const auto resumed = cdsgd_run(ctx.group, ctx.rank, cdsgd(comp, 2, 3, 0.04), 0.9, nullptr, &saved);
      EXPECT_EQ(straight, with_eval) << comp;
      EXPECT_EQ(straight, resumed) << comp;
    }
  }).ok_or_report());
}

TEST(Cdsgd, Gloo_TrainerLearnsOnFourRanks) {
  const fs::path dir = fs::temp_directory_path() / ("mt_cdsgd_trainer_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mt::testing::MultiprocessOptions mo;
  mo.timeout = std::chrono::seconds(240);
  EXPECT_TRUE(mt::testing::run_ranks(4, [&](mt::testing::RankContext& ctx) {
    std::ostringstream log;
    auto tally = std::make_shared<mt::testing::Tally>();
    auto world = std::make_shared<mt::testing::CountingGroup>(ctx.group, mt::testing::world_members(4), tally);
    // The config's momentum 0.9 (nesterov): 2-bit gradients and the one-step delay need the
    // momentum correction (on by default) to train with it (docs/PERF.md). k = 5: in a run of
    // 96 steps a full-precision step every 5th speeds the start (with k = 0 this job reaches
    // about 52%).
    const double acc = mt::testing::train_synthetic_mlp(
        world, ctx.rank, dir.string(),
        {"dist.algorithm=cdsgd", "dist.compressor.type=TWO_BIT", "dist.compressor.tau=0.05",
         "dist.cdsgd.warmup_iters=10", "dist.cdsgd.k=5"},
        log);
    if (ctx.rank == 0) {
      EXPECT_GT(acc, 60.0) << log.str();  // chance is 1/classes
      EXPECT_NE(log.str().find("+momentum-correction"), std::string::npos) << log.str();
      EXPECT_NE(log.str().find("CD-SGD two_bit"), std::string::npos) << log.str();
      // What S-SGD would not do: 2-bit payloads, allgathered (96 steps, 10 of warm-up and every
      // 5th full precision); the last epoch sends under half of float32's bytes (about 1/4).
      const size_t at = log.str().rfind("KB sent per iteration (float32 ");
      ASSERT_NE(at, std::string::npos) << log.str();
      const double sent = std::stod(log.str().substr(log.str().rfind(": ", at) + 2));
      const double dense = std::stod(log.str().substr(at + std::string("KB sent per iteration (float32 ").size()));
      EXPECT_LT(sent, dense / 2) << log.str();
      EXPECT_GE(tally->all_of("allgather") + tally->all_of("allgatherv"), 60) << "the compressed payloads";
    }
  }, mo).ok_or_report());
  fs::remove_all(dir);
}

TEST(Cdsgd, Gloo_BadConfigValuesAreClearErrors) {
  EXPECT_TRUE(mt::testing::run_ranks(1, [](mt::testing::RankContext& ctx) {
    auto make = [&](auto edit) {
      mintrain::RunConfig run;
      run.mutable_dist()->set_algorithm("cdsgd");
      edit(*run.mutable_dist());
      return error_of([&] { dist::make_synchronizer(ctx.group, run); });
    };
    using Dist = mintrain::DistConfig;
    EXPECT_NE(make([](Dist& s) { s.mutable_cdsgd()->set_k(-1); }).find("dist.cdsgd.k"), std::string::npos);
    EXPECT_NE(make([](Dist& s) { s.mutable_cdsgd()->set_warmup_iters(-5); }).find("dist.cdsgd.warmup_iters"),
              std::string::npos);
    EXPECT_NE(make([](Dist& s) { s.mutable_cdsgd()->set_lambda(-0.1); }).find("dist.cdsgd.lambda"),
              std::string::npos);
    EXPECT_NE(make([](Dist& s) { s.mutable_compressor()->set_type("ZIP"); }).find("unknown dist.compressor.type \"ZIP\""),
              std::string::npos);
    EXPECT_NE(make([](Dist& s) { s.mutable_compressor()->set_type("two_bit"); s.mutable_compressor()->set_tau(0); })
                  .find("dist.compressor.tau"),
              std::string::npos);
    // Gradient accumulation is accepted (tests/test_grad_accumulation.cpp trains with it).
    EXPECT_EQ(make([](Dist& s) { s.set_grad_accumulation_steps(2); }), "(no error)");
    // "ssgd" with a compression builds compressed S-SGD; "cdsgd" CD-SGD.
    mintrain::RunConfig sc;
    sc.mutable_dist()->mutable_compressor()->set_type("sign");
    EXPECT_EQ(dist::make_synchronizer(ctx.group, sc)->name(), "ssgd/sign");
    sc.mutable_dist()->set_algorithm("cdsgd");
    EXPECT_EQ(dist::make_synchronizer(ctx.group, sc)->name(), "cdsgd/sign");
    EXPECT_FALSE(dist::make_synchronizer(ctx.group, sc)->takes_over_momentum());
    // With SGD momentum the correction is on by default, and the trainer must then build a
    // plain-SGD optimizer; Adam keeps its own moments.
    sc.mutable_optimizer()->set_momentum(0.9);
    EXPECT_TRUE(dist::make_synchronizer(ctx.group, sc)->takes_over_momentum());
    EXPECT_EQ(dist::make_synchronizer(ctx.group, sc)->name(), "cdsgd/sign+momentum-correction");
    sc.mutable_optimizer()->set_name("adam");
    EXPECT_FALSE(dist::make_synchronizer(ctx.group, sc)->takes_over_momentum());
    sc.mutable_optimizer()->set_name("sgd");
    sc.mutable_dist()->mutable_compressor()->set_momentum_correction(false);
    EXPECT_FALSE(dist::make_synchronizer(ctx.group, sc)->takes_over_momentum());
    sc.mutable_dist()->mutable_compressor()->set_momentum_correction(true);
    sc.mutable_optimizer()->set_momentum(0);
    // name() after setup (the compressor has moved into the exchange).
    VectorModel model({1, 2, 3});
    auto opt = plain_sgd(model, 0.1);
    for (const std::string algo : {"ssgd", "cdsgd"}) {
      sc.mutable_dist()->set_algorithm(algo);
      auto s = dist::make_synchronizer(ctx.group, sc);
      s->setup(model, *opt);
      EXPECT_EQ(s->name(), algo + "/sign");
    }
  }).ok_or_report());
}

// Momentum correction's direction followed by plain SGD (what the trainer builds for it: no
// momentum, no L2 decay; decoupled decay stays) is, to float32 rounding, optim::SGD with the same
// momentum, dampening, Nesterov and weight decay: the velocity it exchanges is exactly SGD's
// momentum buffer (so with lossless compression, CD-SGD/compressed S-SGD with the correction
// are momentum SGD).
TEST(MomentumCorrection, DirectionThenPlainSgdIsSgdWithMomentum) {
  struct Case { double momentum, dampening; bool nesterov; double wd; bool decoupled; };
  for (const Case c : {Case{0.9, 0.0, false, 0.0, false}, Case{0.9, 0.0, true, 5e-4, false},
                       Case{0.8, 0.1, false, 1e-3, false}, Case{0.9, 0.0, true, 1e-2, true}}) {
    const std::vector<float> w0 = {0.5f, -1.25f, 2.0f, 0.01f, -0.3f};
    VectorModel model(w0), corrected(w0);
    optim::OptimizerOptions o;
    o.lr = 0.07;
    o.momentum = c.momentum;
    o.dampening = c.dampening;
    o.nesterov = c.nesterov;
    o.weight_decay = c.wd;
    o.decoupled_weight_decay = c.decoupled;
    auto sgd = optim::build_optimizer("sgd", model.parameters(), o);
    optim::OptimizerOptions plain;
    plain.lr = o.lr;
    plain.decoupled_weight_decay = c.decoupled;
    plain.weight_decay = c.decoupled ? c.wd : 0.0;
    auto plain_sgd = optim::build_optimizer("sgd", corrected.parameters(), plain);
    dist::MomentumCorrectionOptions mo;
    mo.momentum = c.momentum;
    mo.dampening = c.dampening;
    mo.nesterov = c.nesterov;
    mo.weight_decay = c.decoupled ? 0.0 : c.wd;
    dist::MomentumCorrection mc(5, mo);
    core::Generator gen(3);
    for (int t = 0; t < 6; ++t) {
      std::vector<float> g(5);
      for (auto& v : g) v = gen.uniform() * 2.0f - 1.0f;
      Tensor(model.w_).set_grad(Tensor::from_vector(g, {5}));
      sgd->step();
      sgd->zero_grad();
      Tensor(corrected.w_).set_grad(mc.direction(Tensor::from_vector(g, {5}), corrected.w_));
      plain_sgd->step();
      plain_sgd->zero_grad();
      // Equal up to rounding: SGD's CPU loop is compiled per vector width (MT_VECTOR_CLONES) and
      // may fuse a multiply-add that the correction's loop rounds in two steps.
      const std::vector<float> got = corrected.w_.to_vector(), want = model.w_.to_vector();
      for (size_t k = 0; k < want.size(); ++k)
        ASSERT_NEAR(got[k], want[k], 1e-6f * std::max(1.0f, std::abs(want[k])))
            << "step " << t << " element " << k << " nesterov " << c.nesterov;
    }
  }
}

TEST(MomentumCorrection, MaskingClearsTheVelocityOfSentCoordinatesOnly) {
  dist::MomentumCorrectionOptions mo;
  mo.momentum = 0.5;
  mo.mask_sent = true;
  dist::MomentumCorrection mc(4, mo);
  const Tensor w = Tensor::zeros({4});
  mc.direction(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}), w);
  mc.mask_sent(Tensor::from_vector(std::vector<float>{0, 2.5f, 0, -1}, {4}));
  EXPECT_EQ(mc.velocity().to_vector(), (std::vector<float>{1, 0, 3, 0}));
  // The next direction starts from the masked velocity: m*u + g.
  const auto d = mc.direction(Tensor::from_vector(std::vector<float>{1, 1, 1, 1}, {4}), w).to_vector();
  EXPECT_EQ(d, (std::vector<float>{1.5f, 1, 2.5f, 1}));
  // Without masking (dense compressors) nothing is cleared.
  mo.mask_sent = false;
  dist::MomentumCorrection dense(2, mo);
  dense.direction(Tensor::from_vector(std::vector<float>{1, 2}, {2}), Tensor::zeros({2}));
  dense.mask_sent(Tensor::from_vector(std::vector<float>{1, 1}, {2}));
  EXPECT_EQ(dense.velocity().to_vector(), (std::vector<float>{1, 2}));
  // Bad settings name the field.
  mo.momentum = 0;
  EXPECT_NE(error_of([&] { dist::MomentumCorrection(2, mo); }).find("optimizer.momentum"),
            std::string::npos);
}

TEST(TopkWarmup, RatioFallsExponentiallyFromOneToTheTarget) {
  dist::CompressionOptions o;
  o.type = "topk";
  o.topk_ratio = 0.01;
  o.topk_warmup_iters = 4;
  EXPECT_NEAR(dist::topk_ratio_at(o, 0), std::pow(0.01, 0.25), 1e-12);
  EXPECT_NEAR(dist::topk_ratio_at(o, 1), 0.1, 1e-12);
  EXPECT_NEAR(dist::topk_ratio_at(o, 2), std::pow(0.01, 0.75), 1e-12);
  EXPECT_EQ(dist::topk_ratio_at(o, 3), 0.01);
  EXPECT_EQ(dist::topk_ratio_at(o, 100), 0.01);
  o.topk_warmup_iters = 0;
  EXPECT_EQ(dist::topk_ratio_at(o, 0), 0.01);
  o.topk_warmup_iters = -1;
  EXPECT_NE(error_of([&] { dist::make_compressor(o); }).find("dist.compressor.topk_warmup_iters"), std::string::npos);
}

// The exchange's payload follows the warm-up, and an exchange launched before a swap still
// decodes with its own compressor (CD-SGD waits for it one iteration later).
TEST(TopkWarmup, Gloo_ExchangeUsesTheRatioOfItsIterationAndDecodesInFlightOnes) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    dist::CompressionOptions o;
    o.type = "topk";
    o.topk_ratio = 0.01;
    o.topk_warmup_iters = 2;
    const int64_t n = 1000;
    dist::GradientExchange ex(ctx.group, dist::make_compressor(o), n);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 37) % 101) - 50.0f + 0.001f * i;
    const Tensor grad = Tensor::from_vector(g, {n});
    ex.warm_up(o, 0);  // ratio 0.1: 100 values
    dist::PendingExchange first = ex.launch(grad, false);
    EXPECT_EQ(first.payload.numel(), 8 * 100);
    ex.warm_up(o, 1);  // ratio 0.01: 10 values
    dist::PendingExchange second = ex.launch(Tensor::zeros({n}), false);
    EXPECT_EQ(second.payload.numel(), 8 * 10);
    // Both ranks sent the same 100 largest values: the average is exactly them.
    const auto avg = ex.wait(first).to_vector();
    int nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (avg[i] == 0.0f) continue;
      ++nonzero;
      EXPECT_EQ(avg[i], g[i]) << i;
    }
    EXPECT_EQ(nonzero, 100);
    ex.wait(second);
  }).ok_or_report());
}

// CD-SGD with the correction: while in warm-up (full precision, synchronous) it is momentum
// S-SGD; a checkpoint in the delayed phase (velocity included) resumes exactly.
TEST(Cdsgd, Gloo_MomentumCorrectionWarmUpIsMomentumSsgdAndResumesExactly) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    dist::MomentumCorrectionOptions mo;
    mo.momentum = 0.9;
    mo.nesterov = true;
    mo.weight_decay = 1e-3;
    auto options = [&](int warmup, const std::string& comp) {
      dist::CdsgdOptions o = cdsgd(comp, warmup, 3, 0.04);
      o.momentum_correction = mo;
      return o;
    };
    {
      auto m1 = tiny_mlp(7), m2 = tiny_mlp(7);
      optim::OptimizerOptions oo;
      oo.lr = 0.1;
      oo.momentum = 0.9;
      oo.nesterov = true;
      oo.weight_decay = 1e-3;
      auto o1 = mt::testing::guarded(optim::build_optimizer("sgd", m1->parameters(), oo));
      auto o2 = plain_sgd(*m2, 0.1);  // plain SGD: the synchronizer takes the momentum over
      train_ssgd_bsp(ctx.group, *m1, *o1, 6, ctx.rank);
      dist::CdsgdSynchronizer cd(ctx.group, options(100, "none"));
      cd.setup(*m2, *o2);
      train_steps(cd, *m2, *o2, 0, 6, ctx.rank);
      const auto w1 = all_weights(*m1), w2 = all_weights(*m2);
      for (size_t i = 0; i < w1.size(); ++i) ASSERT_NEAR(w1[i], w2[i], 1e-5) << i;
    }
    for (const std::string comp : {"two_bit", "topk"}) {
      // Plain SGD: the synchronizer takes the momentum over.
      SavedState saved;
      const auto straight = cdsgd_run(ctx.group, ctx.rank, options(2, comp), 0.0, nullptr, nullptr);
      const auto with_save = cdsgd_run(ctx.group, ctx.rank, options(2, comp), 0.0, &saved, nullptr);
      bool has_velocity = false;
      for (const auto& [k, t] : saved.sync) has_velocity |= k == "velocity";
      EXPECT_TRUE(has_velocity) << comp;
      const auto resumed = cdsgd_run(ctx.group, ctx.rank, options(2, comp), 0.0, nullptr, &saved);
      EXPECT_EQ(straight, with_save) << comp;
      EXPECT_EQ(straight, resumed) << comp;
    }
  }).ok_or_report());
}

// ---------------------------------------------------------------------------------------------
// CD-SGD as its paper means it: the scalar reference, compression off the training thread, the
// local step's own rate and guard, the summable route past the break-even world size.

namespace {

// TWO_BIT quantisation of one value at threshold t (the compressor's rule).
float two_bit(float v, float t) { return v >= t ? t : (v <= -t ? -t : 0.0f); }

}  // namespace

// A scalar reference, by hand, on 2 ranks: TWO_BIT with threshold tau on the
// per-sample-sum scale (2 samples per rank: tau / 2 on the mean gradient), one warm-up step
// (full precision, synchronous), then 4 delayed steps with k = 3 (the third is full precision:
// it sends the plain g, whose average is mean(g), and keeps r for the fourth, the reference's
// k-step form; sending g + r and clearing r fails this test), lambda 0.5 and a local rate of
// 0.5 x the global one. Each rank computes every rank's residual, the exchanged averages, the
// global steps (one step late) and its own local steps, and compares weights after every step,
// the residual and the global weights shown at the end. Plain BSP in CD-SGD's place fails this
// test: there the local weights equal W after every step.
TEST(Cdsgd, Gloo_TwoBitScalarReferenceWithFullPrecisionEveryThird) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    const int N = 2, delayed_steps = 4;
    const float a = 0.3f, f = 0.5f, lambda = 0.5f, tau = 0.6f;
    const int64_t B = 2;
    const float t = tau / static_cast<float>(B);
    const std::vector<float> W0 = {1.0f, 0.2f, -0.3f, 0.8f};
    VectorModel model(W0);
    auto opt = plain_sgd(model, a);
    dist::CdsgdOptions o = cdsgd("two_bit", /*warmup=*/1, /*k=*/3, lambda);
    o.compression.tau = tau;
    o.samples_per_rank = B;
    o.local_lr_factor = f;
    dist::CdsgdSynchronizer sync(ctx.group, o);
    sync.setup(model, *opt);
    EXPECT_NE(sync.name().find("two_bit(tau=0.3"), std::string::npos) << sync.name();
    // Reference state: every rank's local weights and residual, the global weights.
    std::vector<std::vector<float>> w(N, W0), r(N, std::vector<float>(4, 0.0f));
    std::vector<float> W = W0, pending;
    auto grad = [&](int rank, size_t j) { return w[rank][j] - target(rank)[j]; };
    // Warm-up: mean of the full-precision g + r (r = 0), W <- W - a * mean; w = W.
    {
      std::vector<float> avg(4, 0.0f);
      for (size_t j = 0; j < 4; ++j) {
        float sum = 0.0f;
        for (int i = 0; i < N; ++i) sum += grad(i, j) + r[i][j];
        avg[j] = sum * (1.0f / N);
        W[j] = W[j] - a * avg[j];
      }
      for (int i = 0; i < N; ++i) w[i] = W;
    }
    sync.begin_iteration(0);
    set_quadratic_grad(model.w_, target(ctx.rank));
    mt::testing::step(sync, *opt);
    opt->zero_grad();
    for (size_t j = 0; j < 4; ++j) ASSERT_NEAR(model.w_.to_vector()[j], W[j], 1e-6) << "warm-up";
    for (int s = 0; s < delayed_steps; ++s) {
      const bool full = (s + 1) % 3 == 0;
      std::vector<std::vector<float>> g(N, std::vector<float>(4));
      std::vector<float> avg(4, 0.0f);
      for (size_t j = 0; j < 4; ++j) {
        float sum = 0.0f;
        for (int i = 0; i < N; ++i) {
          g[i][j] = grad(i, j);
          const float v = g[i][j] + r[i][j];
          const float sent = full ? g[i][j] : two_bit(v, t);
          if (!full) r[i][j] = v - sent;
          sum += sent;
        }
        avg[j] = sum * (1.0f / N);
      }
      if (!pending.empty())
        for (size_t j = 0; j < 4; ++j) W[j] = W[j] - a * pending[j];
      pending = avg;
      for (int i = 0; i < N; ++i)
        for (size_t j = 0; j < 4; ++j)
          w[i][j] = W[j] - (a * f) * (g[i][j] + lambda * g[i][j] * g[i][j] * (W[j] - w[i][j]));
      sync.begin_iteration(1 + s);
      set_quadratic_grad(model.w_, target(ctx.rank));
      mt::testing::step(sync, *opt);
      opt->zero_grad();
      const auto got = model.w_.to_vector();
      for (size_t j = 0; j < 4; ++j) ASSERT_NEAR(got[j], w[ctx.rank][j], 1e-5) << "delayed step " << s << " j " << j;
      const auto Wgot = sync.global_weights().to_vector();
      for (size_t j = 0; j < 4; ++j) ASSERT_NEAR(Wgot[j], W[j], 1e-5) << "delayed step " << s << " j " << j;
    }
    // The local weights differ from W (what BSP would give) and between the ranks.
    EXPECT_GT(std::fabs(w[ctx.rank][1] - W[1]), 1e-3);
    sync.prepare_eval(model);
    const auto shown = model.w_.to_vector();
    for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(shown[j], W[j] - a * pending[j], 1e-5) << j;
    const auto residual = sync.pipeline().residual().to_vector();
    for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(residual[j], r[ctx.rank][j], 1e-6) << j;
    // Some value was rounded away and kept in the residual (the reference is not trivially dense).
    float largest = 0.0f;
    for (size_t j = 0; j < 4; ++j) largest = std::max(largest, std::fabs(r[ctx.rank][j]));
    EXPECT_GT(largest, 1e-3f);
  }).ok_or_report());
}

namespace {

// A TWO_BIT compressor whose compress() waits until the test lets it through (each call takes a
// ticket; the gate admits `allowed` of them), for at most 20 s. Per process: each rank is one.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  int64_t allowed = 0, started = 0, finished = 0;
  bool timed_out = false;
};
Gate& gate() {
  static Gate g;
  return g;
}

class GatedTwoBit final : public dist::Compressor {
 public:
  std::string name() const override { return "gated_two_bit"; }
  Tensor compress(const Tensor& in) const override {
    Gate& g = gate();
    {
      std::unique_lock<std::mutex> lock(g.m);
      const int64_t ticket = g.started++;
      if (!g.cv.wait_for(lock, std::chrono::seconds(20), [&] { return ticket < g.allowed; })) g.timed_out = true;
    }
    Tensor out = inner_->compress(in);
    {
      std::lock_guard<std::mutex> lock(g.m);
      ++g.finished;
    }
    g.cv.notify_all();
    return out;
  }
  Tensor decompress(const Tensor& payload, int64_t numel) const override { return inner_->decompress(payload, numel); }
  bool summable() const override { return false; }
  core::DType payload_dtype() const override { return inner_->payload_dtype(); }
  int64_t payload_numel(int64_t numel) const override { return inner_->payload_numel(numel); }

 private:
  std::unique_ptr<dist::Compressor> inner_ = dist::make_two_bit_compressor(0.01f);
};

}  // namespace

// The training thread does not wait for compression: with a compressor that cannot finish until
// the test opens its gate, which it does only after step() returned, every delayed step returns
// while its own iteration's compressions are still held (counted by the gate and by the
// synchronizer), and the run goes on. A synchronizer that compressed on the training thread (or
// waited for it) would sit at the gate until its 20 s timeout, and these counts would be wrong.
// The buckets are small, so backward hands several over through the grad-ready hooks (all of
// them before step() is called).
TEST(Cdsgd, Gloo_StepDoesNotWaitForCompression) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    auto m = tiny_mlp(7);
    auto o = plain_sgd(*m, 0.05);
    dist::CdsgdOptions opts = cdsgd("two_bit", /*warmup=*/1, /*k=*/0, 0.04);
    opts.compressor = std::make_shared<GatedTwoBit>();
    opts.bucket_cap_mb = 100.0 * 4 / (1024 * 1024);  // 100 values
    dist::CdsgdSynchronizer s(ctx.group, opts);
    s.setup(*m, *o);
    const int64_t B = static_cast<int64_t>(s.buckets());
    ASSERT_GE(B, 3);
    Gate& g = gate();
    int64_t delayed = 0;
    for (int it = 0; it < 5; ++it) {
      s.begin_iteration(it);
      auto [x, y] = batch(it, ctx.rank, 8);
      core::cross_entropy(m->forward(x), y).backward();
      // The hooks handed every bucket over during backward; step() launches nothing.
      EXPECT_EQ(s.launched_buckets(), static_cast<size_t>(B)) << "iteration " << it;
      mt::testing::step(s, *o);
      o->zero_grad();
      if (it == 0) continue;  // warm-up: full precision, no compression
      ++delayed;
      {
        std::lock_guard<std::mutex> lock(g.m);
        // Every compression of this iteration was still held when step() returned; the earlier
        // iterations' had all finished (step() applied them).
        EXPECT_EQ(g.finished, B * (delayed - 1)) << "iteration " << it;
        EXPECT_FALSE(g.timed_out) << "iteration " << it << ": step() waited at the gate";
        g.allowed += B;
      }
      g.cv.notify_all();
      EXPECT_EQ(s.steps_before_encoding_done(), delayed);
    }
    s.prepare_eval(*m);
    std::lock_guard<std::mutex> lock(g.m);
    EXPECT_EQ(g.finished, B * delayed);
    EXPECT_FALSE(g.timed_out);
  }).ok_or_report());
}

// The local step goes through the trainer's StepGuard: clipped to max_grad_norm, and a NaN
// gradient on one rank is caught (the step skipped and counted, the local weights left at W),
// while the NaN never reaches the exchange: the other rank's global weights stay finite.
TEST(Cdsgd, Gloo_LocalStepGoesThroughTheStepGuard) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    const float a = 0.1f, max_norm = 0.5f;
    const std::vector<float> W0 = {1.0f, -2.0f, 0.5f, 3.0f};
    VectorModel model(W0);
    optim::StepGuard guard(sgd_of(model, a), max_norm);
    dist::CdsgdSynchronizer sync(ctx.group, cdsgd("none", 0, 0, 0.0));
    sync.setup(model, guard);
    // Step 0: no exchange in flight yet, so W = W0 and the local step is W0 - a * clip(g).
    sync.begin_iteration(0);
    set_quadratic_grad(model.w_, target(ctx.rank));
    std::vector<float> g0(4);
    double norm = 0;
    for (size_t j = 0; j < 4; ++j) {
      g0[j] = W0[j] - target(ctx.rank)[j];
      norm += double(g0[j]) * g0[j];
    }
    norm = std::sqrt(norm);
    ASSERT_GT(norm, max_norm);
    mt::testing::step(sync, guard);
    guard.zero_grad();
    EXPECT_FALSE(guard.last_step_skipped());
    EXPECT_NEAR(guard.last_grad_norm(), norm, 1e-5);
    const float clip = static_cast<float>(max_norm / (norm + 1e-6));
    auto w1 = model.w_.to_vector();
    for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(w1[j], W0[j] - a * g0[j] * clip, 1e-5) << j;
    // Step 1: rank 0's gradient holds a NaN.
    sync.begin_iteration(1);
    set_quadratic_grad(model.w_, target(ctx.rank));
    if (ctx.rank == 0) {
      auto bad = model.w_.grad().to_vector();
      bad[2] = std::nanf("");
      Tensor(model.w_).set_grad(Tensor::from_vector(bad, {4}));
    }
    mt::testing::step(sync, guard);
    guard.zero_grad();
    EXPECT_EQ(guard.last_step_skipped(), ctx.rank == 0);
    EXPECT_EQ(guard.skipped_steps(), ctx.rank == 0 ? 1 : 0);
    if (ctx.rank == 0) {
      EXPECT_EQ(model.w_.to_vector(), sync.global_weights().to_vector());
    }
    // Step 2: exchange 1 (rank 0's bucket sent as zeros) lands in W on both ranks.
    sync.begin_iteration(2);
    set_quadratic_grad(model.w_, target(ctx.rank));
    mt::testing::step(sync, guard);
    guard.zero_grad();
    for (float v : sync.global_weights().to_vector()) EXPECT_TRUE(std::isfinite(v));
    for (float v : model.w_.to_vector()) EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(sync.pipeline().nonfinite_buckets(), ctx.rank == 0 ? 1 : 0);
  }).ok_or_report());
}

// Past the break-even world size the payloads are decoded and summed through a reduce-scatter
// and an allgather (a dense ring's bytes) instead of N-way decoding of allgathered payloads: the
// same training, up to float addition order, on 3 ranks (the shards are padded). "auto" picks it
// from the bits per value: TOPK at ratio 0.5 costs 32 bits a value (break-even 2 ranks), TWO_BIT
// 2 (break-even 32).
TEST(Cdsgd, Gloo_ReduceScatterRouteEqualsAllgather) {
  EXPECT_TRUE(dist::break_even_world_size(2.0) == 32 && dist::break_even_world_size(1.0) == 64);
  EXPECT_TRUE(mt::testing::run_ranks(3, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    auto run = [&](const std::string& comp, const std::string& route, dist::ExchangeRoute* chosen) {
      dist::CdsgdOptions o = cdsgd(comp, 2, 3, 0.04);
      o.compression.topk_ratio = 0.5;
      o.exchange = route;
      auto m = tiny_mlp(7);
      auto opt = plain_sgd(*m, 0.05);
      dist::CdsgdSynchronizer s(ctx.group, o);
      s.setup(*m, *opt);
      *chosen = s.pipeline().route();
      train_steps(s, *m, *opt, 0, 8, ctx.rank);
      s.prepare_eval(*m);
      return all_weights(*m);
    };
    dist::ExchangeRoute r1, r2, r3, r4;
    const auto gathered = run("two_bit", "allgather", &r1);
    const auto reduced = run("two_bit", "reduce_scatter", &r2);
    EXPECT_EQ(r1, dist::ExchangeRoute::Allgather);
    EXPECT_EQ(r2, dist::ExchangeRoute::DecodeReduceScatter);
    ASSERT_EQ(gathered.size(), reduced.size());
    double max_diff = 0;
    for (size_t i = 0; i < gathered.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(gathered[i]) - reduced[i]));
    EXPECT_LT(max_diff, 1e-5);
    EXPECT_NE(gathered, all_weights(*tiny_mlp(7)));  // it trained
    run("two_bit", "auto", &r3);
    EXPECT_EQ(r3, dist::ExchangeRoute::Allgather);  // 3 ranks < 32
    run("topk", "auto", &r4);
    EXPECT_EQ(r4, dist::ExchangeRoute::DecodeReduceScatter);  // 3 ranks > 2
  }).ok_or_report());
}

// The config: cdsgd.local_lr becomes the local rate's factor, tau_scale "sample_sum" divides
// TWO_BIT's tau by data.batch_size, cdsgd.momentum_correction switches the correction (the
// older compressor field still does, and the two disagreeing is an error), rank 0 says what is
// on, and bad values name their field.
TEST(Cdsgd, Gloo_ConfigFieldsReachTheSynchronizer) {
  EXPECT_TRUE(mt::testing::run_ranks(1, [](mt::testing::RankContext& ctx) {
    auto build = [&](auto edit) {
      mintrain::RunConfig run;
      run.mutable_dist()->set_algorithm("cdsgd");
      run.mutable_dist()->mutable_compressor()->set_type("two_bit");
      run.mutable_optimizer()->set_lr(0.2);
      run.mutable_optimizer()->set_momentum(0.9);
      run.mutable_data()->set_batch_size(16);
      edit(run);
      return dist::make_synchronizer(ctx.group, run);
    };
    auto options_of = [](const std::unique_ptr<dist::Synchronizer>& s) {
      return dynamic_cast<const dist::CdsgdSynchronizer&>(*s).options();
    };
    using Run = mintrain::RunConfig;
    auto plain = build([](Run&) {});
    EXPECT_EQ(options_of(plain).local_lr_factor, 1.0);
    EXPECT_EQ(options_of(plain).samples_per_rank, 16);
    EXPECT_EQ(plain->name(), "cdsgd/two_bit(tau=" + std::to_string(0.5f / 16) + ")+momentum-correction");
    EXPECT_TRUE(plain->takes_over_momentum());
    EXPECT_NEAR(options_of(build([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_local_lr(0.05); })).local_lr_factor,
                0.25, 1e-12);
    EXPECT_EQ(options_of(build([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_tau_scale("batch_mean"); }))
                  .samples_per_rank, 1);
    EXPECT_FALSE(build([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_momentum_correction(false); })
                     ->takes_over_momentum());
    EXPECT_FALSE(build([](Run& r) { r.mutable_dist()->mutable_compressor()->set_momentum_correction(false); })
                     ->takes_over_momentum());
    // Under momentum correction L2 decay is in the velocity; the local step keeps decoupled decay.
    EXPECT_EQ(options_of(build([](Run& r) { r.mutable_optimizer()->set_weight_decay(1e-3); })).local_step.weight_decay, 0.0);
    EXPECT_EQ(options_of(build([](Run& r) {
                r.mutable_optimizer()->set_weight_decay(1e-3);
                r.mutable_dist()->mutable_cdsgd()->set_momentum_correction(false);
              })).local_step.weight_decay, 1e-3);
    auto error = [&](auto edit) { return error_of([&] { build(edit); }); };
    EXPECT_NE(error([](Run& r) {
                r.mutable_dist()->mutable_cdsgd()->set_momentum_correction(false);
                r.mutable_dist()->mutable_compressor()->set_momentum_correction(true);
              }).find("dist.cdsgd.momentum_correction (false) and dist.compressor.momentum_correction (true) disagree"),
              std::string::npos);
    EXPECT_NE(error([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_tau_scale("per_batch"); }).find("dist.cdsgd.tau_scale"),
              std::string::npos);
    EXPECT_NE(error([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_exchange("ring"); }).find("dist.cdsgd.exchange"),
              std::string::npos);
    EXPECT_NE(error([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_bucket_cap_mb(0); }).find("dist.cdsgd.bucket_cap_mb"),
              std::string::npos);
    EXPECT_NE(error([](Run& r) { r.mutable_dist()->mutable_cdsgd()->set_local_lr(-1); }).find("dist.cdsgd.local_lr"),
              std::string::npos);
    // Rank 0's start-up line says what is on.
    std::ostringstream log;
    mintrain::RunConfig run;
    run.mutable_dist()->set_algorithm("cdsgd");
    run.mutable_dist()->mutable_compressor()->set_type("two_bit");
    run.mutable_optimizer()->set_momentum(0.9);
    run.mutable_data()->set_batch_size(16);
    auto s = dist::make_synchronizer(ctx.group, run, "", nullptr, &log);
    VectorModel model({1, 2, 3});
    auto opt = plain_sgd(model, 0.1);
    s->setup(model, *opt);
    EXPECT_NE(log.str().find("momentum correction on (dist.cdsgd.momentum_correction"), std::string::npos) << log.str();
    EXPECT_NE(log.str().find("tau 0.5 on the per-sample-sum scale (tau / 16 on the batch mean)"), std::string::npos)
        << log.str();
  }).ok_or_report());
}

// CD-SGD on CUDA parameters: nothing refuses device tensors; the synchronizer stages
// gradients and weights through host memory (its flat state lives there) and a Gloo group
// exchanges them, so a world of one on the GPU trains as the same world on the CPU, up to the
// GPU's float rounding in forward/backward (which can flip a TWO_BIT value at the threshold: a
// step of tau/8 x lr = 3e-4, hence the tolerance). Without a GPU it skips, visibly.
TEST(Cdsgd, CudaParametersTrainLikeCpu) {
  MT_REQUIRE_GPU();
  dist::TCPStoreOptions so;
  so.port = 0;
  so.is_server = true;
  so.rank = 0;
  auto store = std::make_shared<dist::TCPStore>(so);
  auto group = dist::create_process_group(store, 0, 1, mt::testing::test_group_options());
  auto run = [&](core::Device device) {
    auto m = tiny_mlp(7);
    m->to(device);
    auto o = plain_sgd(*m, 0.05, 0.9);  // momentum correction off: the optimizer's momentum on W
    dist::CdsgdSynchronizer s(group, cdsgd("two_bit", 2, 3, 0.04));
    s.setup(*m, *o);
    for (int it = 0; it < 6; ++it) {
      s.begin_iteration(it);
      auto [x, y] = batch(it, 0, 8);
      core::cross_entropy(m->forward(x.to(device)), y.to(device)).backward();
      mt::testing::step(s, *o);
      o->zero_grad();
    }
    s.prepare_eval(*m);
    for (const auto& p : m->parameters()) EXPECT_EQ(p.device(), device);
    m->to(core::Device::cpu());
    return all_weights(*m);
  };
  const auto cpu = run(core::Device::cpu());
  const auto gpu = run(core::Device::cuda(0));
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) ASSERT_NEAR(cpu[i], gpu[i], 2e-3) << i;
}

// TOPK with momentum factor masking: the velocity is masked with a bucket's last payload when the
// next one launches, or at evaluation/checkpoint time, so a resumed run masks exactly as the run
// that never stopped.
TEST(Cdsgd, Gloo_TopkMomentumMaskingResumesExactly) {
  EXPECT_TRUE(mt::testing::run_ranks(2, [](mt::testing::RankContext& ctx) {
    core::set_num_threads(1);
    dist::MomentumCorrectionOptions mo;
    mo.momentum = 0.9;
    mo.mask_sent = true;
    dist::CdsgdOptions o = cdsgd("topk", 2, 0, 0.04);
    o.compression.topk_ratio = 0.1;
    o.momentum_correction = mo;
    o.bucket_cap_mb = 100.0 * 4 / (1024 * 1024);  // several buckets
    SavedState saved;
    const auto straight = cdsgd_run(ctx.group, ctx.rank, o, 0.0, nullptr, nullptr);
    const auto resumed_from = cdsgd_run(ctx.group, ctx.rank, o, 0.0, &saved, nullptr);
    const auto resumed = cdsgd_run(ctx.group, ctx.rank, o, 0.0, nullptr, &saved);
    EXPECT_EQ(straight, resumed_from);
    EXPECT_EQ(straight, resumed);
  }).ok_or_report());
}
