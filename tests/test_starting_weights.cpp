// The same starting weights on every rank (dist/replicas.h make_replicas_identical): ranks that
// built identical models compare digests and broadcast nothing (counted on a process group that
// wraps the world and its subgroups, so the test fails if the broadcast always runs); ranks that
// start apart end with rank 0's weights; with racks the broadcast crosses between racks only on
// the representatives' communicator. Checked on the helper itself and through every
// synchronizer the trainer builds from a config (S-SGD flat and hierarchical, CD-SGD, DS-Sync
// with racks, local SGD), and end to end: the trainer's ranks build the same model from the
// config's seed, so a real run broadcasts nothing. Also: after prepare_eval every rank holds the
// same batch-norm statistics, under every synchronizer without servers.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "apps/config.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/registry.h"
#include "dist/replicas.h"
#include "layers/batch_norm2d.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

namespace mt {
namespace {

using core::Tensor;
using testing::CountingGroup;
using testing::Tally;
using testing::tiny_mlp;
using testing::weights_of;
using testing::world_members;
namespace fs = std::filesystem;

constexpr int64_t kImage = 4, kClasses = 3;

std::shared_ptr<layers::Module> model_of(const std::string& name, uint64_t seed) {
  core::Generator gen(seed);
  layers::ModelOptions o;
  o.in_channels = name == "resnet20" ? 3 : 1;
  o.image_size = name == "resnet20" ? 32 : 28;
  o.hidden = {16, 12};
  o.vocab_size = 64;
  return layers::build_model(name, o, gen);
}

std::unique_ptr<optim::Optimizer> sgd(const layers::Module& model) {
  optim::OptimizerOptions o;
  o.lr = 0.1;
  return optim::build_optimizer("sgd", model.parameters(), o);
}

}  // namespace

// The digest is a function of the weights: the same seed gives the same digest (for the models
// the trainer builds, BERT included), another seed or one changed buffer value another.
TEST(StartingWeights, DigestFollowsEveryParameterAndBuffer) {
  core::set_num_threads(1);
  for (const std::string name : {"mlp", "lenet5", "resnet20", "bert_tiny"}) {
    const uint64_t a = dist::weights_digest(*model_of(name, 3));
    EXPECT_EQ(a, dist::weights_digest(*model_of(name, 3))) << name;
    EXPECT_NE(a, dist::weights_digest(*model_of(name, 4))) << name;
  }
  auto resnet = model_of("resnet20", 3);
  const uint64_t before = dist::weights_digest(*resnet);
  const auto buffers = resnet->named_buffers();
  ASSERT_FALSE(buffers.empty());
  for (const auto& [name, t] : buffers) {
    if (t.dtype() != core::DType::Float32) continue;
    Tensor(t).data<float>()[t.numel() - 1] += 1.0f;  // one running statistic
    break;
  }
  EXPECT_NE(before, dist::weights_digest(*resnet));
}

// Identical models: one allgather of digests and no broadcast at all; rank 0 says so.
TEST(StartingWeights, IdenticalWeightsAreNotBroadcast) {
  const auto result = testing::run_ranks(4, [](testing::RankContext& c) {
    core::set_num_threads(1);
    auto tally = std::make_shared<Tally>();
    auto world = std::make_shared<CountingGroup>(c.group, world_members(4), tally);
    auto model = tiny_mlp(7, kImage, kClasses);
    std::ostringstream log;
    EXPECT_EQ(dist::make_replicas_identical(*world, *model, {}, &log), dist::StartingWeights::AlreadyIdentical);
    EXPECT_EQ(tally->all_of("broadcast"), 0);
    EXPECT_EQ(tally->of("allgather {0,1,2,3}"), 1);
    EXPECT_EQ(weights_of(*model), weights_of(*tiny_mlp(7, kImage, kClasses)));
    if (c.rank == 0) {
      EXPECT_NE(log.str().find("all 4 ranks hold the same weights"), std::string::npos) << log.str();
    }
    if (c.rank != 0) {
      EXPECT_EQ(log.str(), "");
    }
  });
  EXPECT_TRUE(result.ok_or_report());
}

// One rank apart (flat), or every rank apart in two racks: every rank ends with rank 0's weights;
// in racks nothing goes over the world, the representatives' communicator {0,2} carries the copy
// between the racks and each rack's communicator the copy inside it.
TEST(StartingWeights, DifferentWeightsEndAsRankZeros) {
  for (bool racks : {false, true}) {
    const auto result = testing::run_ranks(4, [racks](testing::RankContext& c) {
      core::set_num_threads(1);
      auto tally = std::make_shared<Tally>();
      auto world = std::make_shared<CountingGroup>(c.group, world_members(4), tally);
      const uint64_t seed = racks ? 7 + c.rank : (c.rank == 2 ? 8 : 7);
      auto model = tiny_mlp(seed, kImage, kClasses);
      const std::vector<int> rack_of = racks ? std::vector<int>{0, 0, 1, 1} : std::vector<int>{};
      std::ostringstream log;
      EXPECT_EQ(dist::make_replicas_identical(*world, *model, rack_of, &log), dist::StartingWeights::Broadcast);
      EXPECT_EQ(weights_of(*model), weights_of(*tiny_mlp(7, kImage, kClasses)));
      if (racks) {
        EXPECT_EQ(tally->of("broadcast {0,1,2,3}"), 0);
        const bool representative = c.rank == 0 || c.rank == 2;
        EXPECT_EQ(tally->of("broadcast {0,2}") > 0, representative);
        EXPECT_GT(tally->of(c.rank < 2 ? "broadcast {0,1}" : "broadcast {2,3}"), 0);
        if (c.rank == 0) {
          EXPECT_NE(log.str().find("rank(s) 1, 2, 3 differ"), std::string::npos) << log.str();
        }
        if (c.rank == 0) {
          EXPECT_NE(log.str().find("once into each of 2 racks"), std::string::npos) << log.str();
        }
      } else {
        EXPECT_GT(tally->of("broadcast {0,1,2,3}"), 0);
        if (c.rank == 0) {
          EXPECT_NE(log.str().find("rank(s) 2 differ"), std::string::npos) << log.str();
        }
      }
    });
    EXPECT_TRUE(result.ok_or_report()) << (racks ? "two racks" : "flat");
  }
}

// Through the registry, as the trainer builds each synchronizer: with identical models setup
// broadcasts nothing; with models apart every rank ends with rank 0's, and where the config
// gives racks no broadcast goes over the flat world.
TEST(StartingWeights, EverySynchronizerBroadcastsOnlyWhenWeightsDiffer) {
  struct Case {
    std::string name, dist_text;
    bool racks;
  };
  const std::vector<Case> cases = {
      {"S-SGD", "algorithm: \"ssgd\" ssgd { schedule: \"bsp\" }", false},
      {"S-SGD hierarchical",
       "algorithm: \"ssgd\" ssgd { schedule: \"bsp\" allreduce: \"hierarchical\" ranks_per_rack: 2 }", true},
      {"CD-SGD", "algorithm: \"cdsgd\" cdsgd { warmup_iters: 1 }", false},
      {"DS-Sync", "algorithm: \"dssync\" dssync { ranks_per_rack: 2 cross_period: 2 }", true},
      {"local SGD", "algorithm: \"local_sgd\"", false},
  };
  for (const Case& k : cases) {
    for (bool apart : {false, true}) {
      const auto result = testing::run_ranks(4, [&](testing::RankContext& c) {
        core::set_num_threads(1);
        const apps::RunConfig run = apps::parse_config("dist { " + k.dist_text + " }", "test");
        auto tally = std::make_shared<Tally>();
        auto world = std::make_shared<CountingGroup>(c.group, world_members(4), tally);
        std::ostringstream log;
        auto sync = dist::make_synchronizer(world, run, "same config", nullptr, &log);
        auto model = tiny_mlp(apart ? 7 + c.rank : 7, kImage, kClasses);
        auto opt = sgd(*model);
        sync->setup(*model, *opt);
        EXPECT_EQ(weights_of(*model), weights_of(*tiny_mlp(7, kImage, kClasses)));
        if (!apart) {
          EXPECT_EQ(tally->all_of("broadcast"), 0) << log.str();
          if (c.rank == 0) {
            EXPECT_NE(log.str().find("nothing broadcast"), std::string::npos) << log.str();
          }
        } else {
          EXPECT_GT(tally->all_of("broadcast"), 0);
          if (k.racks) {
            EXPECT_EQ(tally->of("broadcast {0,1,2,3}"), 0) << "the copy went over the flat world";
          }
          if (c.rank == 0) {
            EXPECT_NE(log.str().find("differ from rank 0's"), std::string::npos) << log.str();
          }
        }
      });
      EXPECT_TRUE(result.ok_or_report()) << k.name << (apart ? ", weights apart" : ", weights identical");
    }
  }
}

// Evaluation sees one set of batch-norm statistics: ranks that normalised different shards hold
// different running means and variances, and after prepare_eval every rank holds the same ones,
// for every synchronizer without servers.
TEST(StartingWeights, EverySynchronizerEvaluatesOneSetOfBatchNormStatistics) {
  for (const std::string dist_text : {"algorithm: \"ssgd\"", "algorithm: \"cdsgd\" cdsgd { warmup_iters: 1 }",
                                      "algorithm: \"dssync\"", "algorithm: \"local_sgd\"",
                                      "algorithm: \"bytescheduler\"", "algorithm: \"dlcp\""}) {
    const auto result = testing::run_ranks(2, [&](testing::RankContext& c) {
      core::set_num_threads(1);
      const apps::RunConfig run = apps::parse_config("dist { " + dist_text + " }", "test");
      auto sync = dist::make_synchronizer(c.group, run, "same config");
      layers::BatchNorm2d bn(2);
      auto opt = testing::guarded(sgd(bn));
      sync->setup(bn, *opt);
      for (int t = 0; t < 3; ++t) {
        sync->begin_iteration(t);
        core::Generator gen(static_cast<uint64_t>(t + 10 * c.rank));
        const Tensor y = bn.forward(core::rand_uniform({4, 2, 3, 3}, -1.0f, 1.0f + 2.0f * c.rank, gen));
        core::mean(core::mul(y, y)).backward();
        testing::step(*sync, *opt);
        opt->zero_grad();
      }
      sync->prepare_eval(bn);
      for (const Tensor& buffer : {bn.running_mean(), bn.running_var()}) {
        Tensor sum = buffer.clone();
        c.group->allreduce(sum, dist::ReduceOp::Sum)->wait();
        const std::vector<float> mine = buffer.to_vector(), both = sum.to_vector();
        for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(both[i], 2.0f * mine[i]) << "value " << i;
      }
    });
    EXPECT_TRUE(result.ok_or_report()) << dist_text;
  }
}

// End to end: the trainer's ranks build their models from the config's seed, so a two-rank run
// finds them identical and broadcasts nothing (fails if model building ever depended on the rank
// or on anything but the seed).
TEST(StartingWeights, TrainerRanksStartIdenticalWithoutBroadcast) {
  const fs::path dir = fs::temp_directory_path() / ("mt_starting_weights_" + std::to_string(::getpid()));
  const auto result = testing::run_ranks(2, [&](testing::RankContext& c) {
    std::ostringstream log;
    testing::train_synthetic_mlp(c.group, c.rank, dir.string(),
                                 {"epochs=1", "data.limit_train_batches=2", "checkpoint.dir="}, log);
    if (c.rank == 0) {
      EXPECT_NE(log.str().find("all 2 ranks hold the same weights"), std::string::npos) << log.str();
    }
  });
  fs::remove_all(dir);
  EXPECT_TRUE(result.ok_or_report());
}

}  // namespace mt
