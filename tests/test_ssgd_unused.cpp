// S-SGD when a parameter gets no gradient on some ranks (a branch taken only on odd ranks):
// buckets go out in bucket order on every rank (dist/ssgd/ssgd_synchronizer.cpp,
// launch_ready_in_order), the unused gradient counts as zero, and the average is right, on 2
// and 4 real Gloo ranks, within the timeout. Before the order guard, even ranks sent the used
// parameter's bucket at once and odd ranks sent the other one first: two allreduces of the
// same shape paired across ranks, and silently wrong sums.
#include <gtest/gtest.h>

#include <vector>

#include "core/grad_mode.h"
#include "core/ops/elementwise.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "layers/module.h"
#include "optim/registry.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

namespace mt {
namespace {

using core::Tensor;

// Two weights of one shape; `b` is used only when the rank is odd.
class TwoBranches : public layers::Module {
 public:
  explicit TwoBranches(uint64_t seed) {
    core::Generator gen(seed);
    a_ = register_parameter("a", core::rand_uniform({4, 3}, -1, 1, gen));
    b_ = register_parameter("b", core::rand_uniform({4, 3}, -1, 1, gen));
  }
  Tensor forward(const Tensor& x) override { return loss(x, true); }
  std::string type_name() const override { return "TwoBranches"; }
  // The a-branch first and deeper; the b-branch, built after it, is what backward reaches first.
  Tensor loss(const Tensor& x, bool use_b) const {
    Tensor l = core::sum(core::tanh(core::tanh(core::matmul(x, a_.transpose(0, 1)))));
    if (use_b) l = core::add(l, core::sum(core::matmul(x, b_.transpose(0, 1))));
    return l;
  }
  Tensor a_, b_;
};

Tensor input_of(int rank) {
  core::Generator gen(100 + rank);
  return core::rand_uniform({5, 3}, -1, 1, gen);
}

std::vector<std::vector<float>> grads_of(const TwoBranches& m) {
  std::vector<std::vector<float>> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<float>(p.numel(), 0.0f));
  return g;
}

void check_world(int n) {
  core::set_num_threads(1);
  EXPECT_TRUE(mt::testing::run_ranks(n, [n](mt::testing::RankContext& ctx) {
                auto model = std::make_shared<TwoBranches>(7 + ctx.rank);  // the broadcast makes them rank 0's
                optim::OptimizerOptions oo;
                oo.lr = 1.0;
                auto opt = mt::testing::guarded(optim::build_optimizer("sgd", model->parameters(), oo));
                dist::SsgdOptions so;
                so.schedule = dist::Schedule::WFBP;  // a message per parameter: the order is visible
                so.config_text = "same";
                dist::SsgdSynchronizer sync(ctx.group, so);
                sync.setup(*model, *opt);
                const std::vector<std::vector<float>> start = {model->a_.to_vector(), model->b_.to_vector()};

                // The reference: every rank's gradient on a replica with the same weights, unused
                // ones zero, averaged.
                std::vector<std::vector<float>> mean(2, std::vector<float>(12, 0.0f));
                for (int r = 0; r < n; ++r) {
                  TwoBranches replica(0);
                  {
                    core::NoGradGuard no_grad;
                    replica.a_.copy_(model->a_);
                    replica.b_.copy_(model->b_);
                  }
                  replica.loss(input_of(r), r % 2 == 1).backward();
                  const auto g = grads_of(replica);
                  for (int p = 0; p < 2; ++p)
                    for (int i = 0; i < 12; ++i) mean[p][i] += g[p][i] / n;
                }

                for (int step = 0; step < 2; ++step) {
                  sync.begin_iteration(step);
                  model->loss(input_of(ctx.rank), ctx.rank % 2 == 1).backward();
                  mt::testing::step(sync, *opt);
                  if (step == 0) {
                    // lr 1, plain SGD: the step moved each weight by exactly the averaged gradient.
                    const std::vector<std::vector<float>> now = {model->a_.to_vector(), model->b_.to_vector()};
                    for (int p = 0; p < 2; ++p)
                      for (int i = 0; i < 12; ++i)
                        ASSERT_NEAR(start[p][i] - now[p][i], mean[p][i], 1e-5)
                            << "rank " << ctx.rank << " param " << (p ? "b" : "a") << "[" << i << "]";
                  }
                  opt->zero_grad();
                }
              }).ok_or_report());
}

TEST(SsgdUnusedParameters, TwoRanksSendInOneOrderAndAverageZerosForTheUnused) { check_world(2); }
TEST(SsgdUnusedParameters, FourRanksSendInOneOrderAndAverageZerosForTheUnused) { check_world(4); }

}  // namespace
}  // namespace mt
