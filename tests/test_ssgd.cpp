// S-SGD schedules. Ranks run as threads of this process over an in-process process group
// (FakeGroup below: the same contract as the Gloo group, collectives on a comm thread per rank,
// reductions summed in rank order so results do not depend on timing). Checked: N ranks with
// per-rank batch b end with the weights of one rank with batch N*b; every schedule gives the
// same weights; start-up broadcast and config check; gradient accumulation; the trainer learns
// on 4 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "apps/config.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"
#include "support/counting_group.h"
#include "support/dist_training.h"
#include "support/multiprocess.h"

using namespace mt;
using core::Tensor;
namespace fs = std::filesystem;

namespace {

// ---- An in-process world: N ranks as threads ----

class FakeWorld {
 public:
  explicit FakeWorld(int size) : size_(size) {}
  int size() const { return size_; }
  // One collective: every rank deposits its input; when all have, each gets `combine`'s result.
  std::vector<float> exchange(int64_t seq, int rank, std::vector<float> in,
                              const std::function<std::vector<float>(const std::vector<std::vector<float>>&)>& combine) {
    std::unique_lock<std::mutex> lock(mu_);
    Slot& s = slots_[seq];
    if (s.inputs.empty()) s.inputs.resize(size_);
    s.inputs[rank] = std::move(in);
    if (++s.arrived == size_) {
      s.result = combine(s.inputs);
      cv_.notify_all();
    }
    MT_CHECK(cv_.wait_for(lock, std::chrono::seconds(20), [&] { return s.arrived == size_; }),
             "fake group: rank ", rank, " timed out in collective ", seq);
    std::vector<float> out = s.result;
    if (++s.departed == size_) slots_.erase(seq);
    return out;
  }

 private:
  struct Slot {
    std::vector<std::vector<float>> inputs;
    std::vector<float> result;
    int arrived = 0, departed = 0;
  };
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Slot> slots_;
};

class FakeWork : public dist::Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mu);
    MT_CHECK(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }), "fake work timed out");
    if (error) std::rethrow_exception(error);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

class FakeGroup : public dist::ProcessGroup {
 public:
  FakeGroup(std::shared_ptr<FakeWorld> world, int rank) : world_(std::move(world)), rank_(rank) {
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string backend() const override { return "fake"; }
  std::string describe() const override { return "fake world of " + std::to_string(size()); }

  std::shared_ptr<dist::Work> allreduce(Tensor& t, dist::ReduceOp) override {
    ++allreduces_issued;
    return enqueue([t](FakeWorld& w, int64_t seq, int rank) mutable {
      auto out = w.exchange(seq, rank, t.to_vector(), [](const auto& in) {
        std::vector<float> sum(in[0].size(), 0.0f);
        for (const auto& v : in)  // rank order: deterministic sums
          for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
        return sum;
      });
      std::copy(out.begin(), out.end(), t.data<float>());
    });
  }
  std::shared_ptr<dist::Work> broadcast(Tensor& t, int root) override {
    return enqueue([t, root](FakeWorld& w, int64_t seq, int rank) mutable {
      auto out = w.exchange(seq, rank, t.to_vector(), [root](const auto& in) { return in[root]; });
      std::copy(out.begin(), out.end(), t.data<float>());
    });
  }
  std::shared_ptr<dist::Work> allgather(const Tensor& in, Tensor& out) override {
    return enqueue([in, out](FakeWorld& w, int64_t seq, int rank) mutable {
      auto all = w.exchange(seq, rank, in.to_vector(), [](const auto& ins) {
        std::vector<float> cat;
        for (const auto& v : ins) cat.insert(cat.end(), v.begin(), v.end());
        return cat;
      });
      std::copy(all.begin(), all.end(), out.data<float>());
    });
  }
  std::shared_ptr<dist::Work> allgatherv(const Tensor&, Tensor&, const std::vector<int64_t>&) override {
    MT_FAIL("fake group: allgatherv not needed");
  }
  std::shared_ptr<dist::Work> reduce_scatter(const Tensor&, Tensor&) override {
    MT_FAIL("fake group: reduce_scatter not needed");
  }
  void barrier() override {
    Tensor t = Tensor::zeros({1});
    allreduce(t, dist::ReduceOp::Sum)->wait();
  }
  void release_subgroup(const std::vector<int>&) override {}  // it never makes one
  std::shared_ptr<dist::ProcessGroup> subgroup(const std::vector<int>&) override {
    MT_FAIL("fake group: subgroups not needed");
  }
  int64_t allreduces_issued = 0;  // by this rank

 private:
  using Op = std::function<void(FakeWorld&, int64_t, int)>;
  std::shared_ptr<dist::Work> enqueue(Op op) {
    auto work = std::make_shared<FakeWork>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(op), work, next_seq_++});
    }
    cv_.notify_all();
    return work;
  }
  void loop() {  // the comm thread: collectives in issue order, off the training thread
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        item.op(*world_, item.seq, rank_);
      } catch (...) {
        item.work->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(item.work->mu);
        item.work->done = true;
      }
      item.work->cv.notify_all();
    }
  }
  struct Item {
    Op op;
    std::shared_ptr<FakeWork> work;
    int64_t seq = 0;
  };
  std::shared_ptr<FakeWorld> world_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int64_t next_seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// Runs fn(rank, group) on `size` threads; rethrows the first failure.
void run_ranks(int size, const std::function<void(int, std::shared_ptr<dist::ProcessGroup>)>& fn,
               std::shared_ptr<FakeWorld>* world_out = nullptr) {
  auto world = std::make_shared<FakeWorld>(size);
  if (world_out) *world_out = world;
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, std::make_shared<FakeGroup>(world, r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// ---- A tiny model and a fixed global data stream ----

constexpr int64_t kImage = 6;
constexpr int64_t kClasses = 4;

std::shared_ptr<layers::Module> tiny_mlp(uint64_t seed) {
  return mt::testing::tiny_mlp(seed, kImage, kClasses);
}

// Global batch `step`: `rows` examples; rank r of n reads rows [r*rows/n, (r+1)*rows/n).
std::pair<Tensor, Tensor> global_batch(int step, int64_t rows) {
  return mt::testing::synthetic_batch(step, rows, kImage, kClasses);
}

std::pair<Tensor, Tensor> slice(const std::pair<Tensor, Tensor>& b, int64_t start, int64_t len) {
  return {b.first.narrow(0, start, len).contiguous(), b.second.narrow(0, start, len).contiguous()};
}


// One process, batch `rows` per step, `micro` micro-batches of rows/micro each.
std::vector<std::vector<float>> train_single(int steps, int64_t rows) {
  auto model = tiny_mlp(7);
  auto opt = mt::testing::reference_sgd(*model);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s, rows);
    core::cross_entropy(model->forward(x), y).backward();
    opt->step();
    opt->zero_grad();
  }
  return mt::testing::weights_of(*model);
}

dist::SsgdOptions options(dist::Schedule s) {
  dist::SsgdOptions o;
  o.schedule = s;
  o.config_text = "same config";
  o.profile_iters = 1;
  // Tiny buckets so FUSION really splits this small model into several messages.
  o.bucket_cap_mb = 600.0 / (1 << 20);
  o.first_bucket_cap_mb = 100.0 / (1 << 20);
  return o;
}

// N ranks; rank r's model starts from seed 7 + r (the broadcast must fix that); each step rank
// r trains on its slice of the global batch, in `micro` micro-batches.
std::vector<std::vector<float>> train_ranks(int n, dist::SsgdOptions o, int steps, int64_t rows,
                                            int micro = 1) {
  std::vector<std::vector<std::vector<float>>> result(n);
  o.grad_accumulation_steps = micro;
  run_ranks(n, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    auto model = tiny_mlp(7 + r);
    auto opt = mt::testing::reference_sgd(*model);
    dist::SsgdSynchronizer sync(g, o);
    sync.setup(*model, *opt);
    const int64_t per_rank = rows / n, per_micro = per_rank / micro;
    for (int s = 0; s < steps; ++s) {
      const auto batch = global_batch(s, rows);
      for (int m = 0; m < micro; ++m) {
        sync.begin_iteration(s);
        // Micro-batch m of every rank: rows r*per_rank + m*per_micro ...
        auto [x, y] = slice(batch, r * per_rank + m * per_micro, per_micro);
        const Tensor loss = core::cross_entropy(model->forward(x), y);
        loss.backward(Tensor::full(loss.shape(), 1.0 / micro));
      }
      mt::testing::step(sync, *opt);
      opt->zero_grad();
    }
    result[r] = mt::testing::weights_of(*model);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(result[r], result[0]) << "rank " << r << " diverged";
  return result[0];
}

void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size());
    for (size_t i = 0; i < a[p].size(); ++i)
      ASSERT_NEAR(a[p][i], b[p][i], 2e-5 + 2e-4 * std::abs(b[p][i])) << what << ": param " << p << "[" << i << "]";
  }
}

class SsgdTest : public ::testing::Test {
 protected:
  void SetUp() override { core::set_num_threads(1); }
};

}  // namespace

// WFBP and FUSION overlap communication with backward: by the time the last gradient of
// backward is ready, messages of the gradients before it are already with the process group.
// A hook registered after the synchronizer's counts the launched messages at every gradient; the
// count at the second-to-last gradient is what left while backward still ran. BSP sends nothing
// before backward ends (the contrast that makes the counter meaningful). Both iterations count:
// FUSION rebuilds its buckets after the first.
TEST_F(SsgdTest, WfbpAndFusionStartCommunicatingBeforeBackwardEnds) {
  for (const auto schedule : {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION}) {
    std::vector<std::vector<size_t>> early(2);  // per rank, per iteration
    run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
      auto model = tiny_mlp(7);
      auto opt = mt::testing::reference_sgd(*model);
      dist::SsgdSynchronizer sync(g, options(schedule));
      sync.setup(*model, *opt);
      const auto launched_at_hook = mt::testing::record_launched_buckets(sync, opt->params());
      for (int s = 0; s < 2; ++s) {
        launched_at_hook->clear();
        sync.begin_iteration(s);
        auto [x, y] = slice(global_batch(s, 8), r * 4, 4);
        core::cross_entropy(model->forward(x), y).backward();
        ASSERT_EQ(launched_at_hook->size(), opt->params().size());
        early[r].push_back((*launched_at_hook)[launched_at_hook->size() - 2]);
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
    });
    const std::string name = dist::schedule_name(schedule);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(early[r].size(), 2u);
      for (size_t it = 0; it < 2; ++it) {
        if (schedule == dist::Schedule::BSP) {
          EXPECT_EQ(early[r][it], 0u) << name << " rank " << r << " iteration " << it;
        } else if (schedule == dist::Schedule::WFBP && it == 1) {
          // One message per parameter: all but the last gradient's have left, once the buckets
          // follow the hook order seen in the first iteration (messages go in bucket order).
          EXPECT_EQ(early[r][it], 5u) << name << " rank " << r << " iteration " << it;
        } else {
          EXPECT_GE(early[r][it], 1u) << name << " rank " << r << " iteration " << it;
        }
      }
    }
  }
}

TEST_F(SsgdTest, EverySchedule_NRanksMatchOneRankWithNTimesTheBatch) {
  constexpr int kSteps = 5;
  constexpr int64_t kRows = 16;
  const auto reference = train_single(kSteps, kRows);
  for (int n : {2, 4}) {
    for (auto s : {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION, dist::Schedule::MGWFBP}) {
      auto o = options(s);
      if (s == dist::Schedule::MGWFBP) {  // a cost that makes merging worthwhile
        o.alpha = 1.0;
        o.beta = 0.0;
      }
      const auto w = train_ranks(n, o, kSteps, kRows);
      expect_close(w, reference, dist::schedule_name(s) + " on " + std::to_string(n) + " ranks");
    }
  }
}

TEST_F(SsgdTest, SchedulesBuildTheExpectedMessages) {
  // After the run, inspect the buckets each schedule settled on (mlp: 6 parameters).
  for (auto s : {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION, dist::Schedule::MGWFBP}) {
    size_t buckets = 0;
    bool plan = false;
    run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
      auto model = tiny_mlp(7);
      auto opt = mt::testing::reference_sgd(*model);
      auto o = options(s);
      o.bucket_cap_mb = 1200.0 / (1 << 20);
      o.alpha = 1.0;  // huge start-up cost: MG-WFBP merges everything into one message
      o.beta = 0.0;
      dist::SsgdSynchronizer sync(g, o);
      sync.setup(*model, *opt);
      for (int it = 0; it < 3; ++it) {
        sync.begin_iteration(it);
        auto [x, y] = global_batch(it, 8);
        core::cross_entropy(model->forward(x), y).backward();
        mt::testing::step(sync, *opt);
        opt->zero_grad();
      }
      if (r == 0) {
        buckets = sync.buckets().size();
        plan = sync.plan_ready();
      }
    });
    switch (s) {
      case dist::Schedule::BSP: EXPECT_EQ(buckets, 1u); break;
      case dist::Schedule::WFBP: EXPECT_EQ(buckets, 6u); break;
      case dist::Schedule::FUSION: EXPECT_GT(buckets, 1u); EXPECT_LT(buckets, 6u); break;
      case dist::Schedule::MGWFBP: EXPECT_TRUE(plan); EXPECT_EQ(buckets, 1u); break;
    }
  }
}

// The measurement times no size above the whole gradient (here under 8 KiB: the two smallest
// sizes only, where MG-WFBP's sizes go to 4 MiB).
TEST_F(SsgdTest, MgwfbpMeasuresTheNetworkAndProfilesBackward) {
  run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> inner) {
    auto tally = std::make_shared<mt::testing::Tally>();
    auto g = std::make_shared<mt::testing::CountingGroup>(inner, mt::testing::world_members(2), tally);
    auto model = tiny_mlp(7);
    auto opt = mt::testing::reference_sgd(*model);
    auto o = options(dist::Schedule::MGWFBP);
    o.profile_iters = 2;
    dist::SsgdSynchronizer sync(g, o);
    sync.setup(*model, *opt);
    int64_t floats = 0;
    for (const Tensor& p : opt->params()) floats += p.numel();
    ASSERT_LT(floats, 2048);
    EXPECT_EQ(*std::max_element(tally->allreduced.begin(), tally->allreduced.end()), 2048);
    EXPECT_GE(sync.cost().alpha, 0.0);
    EXPECT_GT(sync.cost().alpha + sync.cost().beta, 0.0);
    for (int it = 0; it < 4; ++it) {
      EXPECT_EQ(sync.plan_ready(), it >= 3);
      sync.begin_iteration(it);
      auto [x, y] = global_batch(it, 8);
      core::cross_entropy(model->forward(x), y).backward();
      mt::testing::step(sync, *opt);
      opt->zero_grad();
    }
    EXPECT_EQ(sync.profiled_backward().size(), 6u);
    EXPECT_GE(sync.hook_order().front(), 4u);  // the last layer's gradients are final first
  });
}

TEST_F(SsgdTest, StartupBroadcastMakesReplicasIdentical) {
  run_ranks(3, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    core::Generator gen(100 + r);  // different seeds on every rank
    layers::ModelOptions mo;
    mo.in_channels = 3;
    mo.image_size = 8;
    auto model = layers::build_model("resnet20", mo, gen);
    for (auto& [name, b] : model->named_buffers())
      if (b.dtype() == core::DType::Float32) Tensor(b).fill_(r + 1.0);  // rank-specific statistics
    auto opt = mt::testing::reference_sgd(*model);
    dist::SsgdSynchronizer sync(g, options(dist::Schedule::FUSION));
    sync.setup(*model, *opt);
    // Every rank now holds rank 0's weights and buffers: compare with a model built from seed 100.
    core::Generator gen0(100);
    auto ref = layers::build_model("resnet20", mo, gen0);
    const auto a = model->named_parameters(), b = ref->named_parameters();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
    for (auto& [name, buf] : model->named_buffers())
      if (buf.dtype() == core::DType::Float32) {
        for (float v : buf.to_vector()) ASSERT_EQ(v, 1.0f) << name << " on rank " << r;
      }
  });
}

TEST_F(SsgdTest, ConfigMismatchIsAClearErrorOnEveryRank) {
  std::vector<std::string> messages(3);
  run_ranks(3, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    auto model = tiny_mlp(7);
    auto opt = mt::testing::reference_sgd(*model);
    auto o = options(dist::Schedule::WFBP);
    if (r == 2) o.config_text = "epochs: 3";
    dist::SsgdSynchronizer sync(g, o);
    try {
      sync.setup(*model, *opt);
    } catch (const core::Error& e) {
      messages[r] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(messages[r].find("config of rank(s) 2 differs from rank 0"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("--set"), std::string::npos);
  }
  // A model mismatch names the rank too.
  std::vector<std::string> model_messages(2);
  run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    core::Generator gen(1);
    layers::ModelOptions mo;
    mo.image_size = kImage;
    mo.hidden = {r == 1 ? 8 : 16};
    auto model = layers::build_model("mlp", mo, gen);
    auto opt = mt::testing::reference_sgd(*model);
    dist::SsgdSynchronizer sync(g, options(dist::Schedule::BSP));
    try {
      sync.setup(*model, *opt);
    } catch (const core::Error& e) {
      model_messages[r] = e.what();
    }
  });
  for (const auto& m : model_messages) EXPECT_NE(m.find("model of rank(s) 1 differs"), std::string::npos) << m;
}

TEST_F(SsgdTest, GradientAccumulationMatchesTheBigBatchAndCommunicatesOnce) {
  const auto reference = train_single(3, 16);
  for (auto s : {dist::Schedule::WFBP, dist::Schedule::FUSION}) {
    const auto w = train_ranks(2, options(s), 3, 16, /*micro=*/2);
    expect_close(w, reference, "accumulation, " + dist::schedule_name(s));
  }
  // Allreduces issued: with k = 4 micro-batches, WFBP sends 6 per step (one per parameter), not 24.
  std::vector<int64_t> count(2);
  auto o = options(dist::Schedule::WFBP);
  o.grad_accumulation_steps = 4;
  run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    auto model = tiny_mlp(7);
    auto opt = mt::testing::reference_sgd(*model);
    dist::SsgdSynchronizer sync(g, o);
    sync.setup(*model, *opt);
    const int64_t before = dynamic_cast<FakeGroup&>(*g).allreduces_issued;
    for (int m = 0; m < 4; ++m) {
      sync.begin_iteration(0);
      auto [x, y] = global_batch(m, 4);
      core::cross_entropy(model->forward(x), y).backward();
      if (m < 3) {
        EXPECT_EQ(dynamic_cast<FakeGroup&>(*g).allreduces_issued, before);
      }
    }
    mt::testing::step(sync, *opt);
    count[r] = dynamic_cast<FakeGroup&>(*g).allreduces_issued - before;
  });
  EXPECT_EQ(count, (std::vector<int64_t>{6, 6}));
}

TEST_F(SsgdTest, TimelineRecordsComputeAndCommunication) {
  const fs::path dir = fs::temp_directory_path() / ("mt_ssgd_tl_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  run_ranks(2, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    auto model = tiny_mlp(7);
    auto opt = mt::testing::reference_sgd(*model);
    auto o = options(dist::Schedule::FUSION);
    o.timeline = std::make_shared<dist::Timeline>((dir / "trace-{rank}.json").string(), r);
    dist::SsgdSynchronizer sync(g, o);
    sync.setup(*model, *opt);
    for (int it = 0; it < 2; ++it) {
      sync.begin_iteration(it);
      auto [x, y] = global_batch(it, 8);
      core::cross_entropy(model->forward(x), y).backward();
      mt::testing::step(sync, *opt, o.timeline.get());
    }
    o.timeline->write();
  });
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir / ("trace-" + std::to_string(r) + ".json"));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string t = ss.str();
    EXPECT_NE(t.find("\"traceEvents\""), std::string::npos);
    EXPECT_NE(t.find("\"name\":\"allreduce b0\""), std::string::npos);
    EXPECT_NE(t.find("\"name\":\"optimizer\""), std::string::npos);
    EXPECT_NE(t.find("\"pid\":" + std::to_string(r)), std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_F(SsgdTest, TrainerLearnsOnFourRanks) {
  const fs::path dir = fs::temp_directory_path() / ("mt_ssgd_trainer_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<double> acc(4);
  std::ostringstream log0;
  run_ranks(4, [&](int r, std::shared_ptr<dist::ProcessGroup> g) {
    acc[r] = mt::testing::train_synthetic_mlp(
        g, r, dir.string(),
        {"dist.ssgd.schedule=MGWFBP", "dist.ssgd.profile_iters=2", "dist.timeline_file=trace-{rank}.json"}, log0);
  });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(acc[r], acc[0]);
  EXPECT_GT(acc[0], 60.0) << log0.str();  // chance is 1/classes
  EXPECT_NE(log0.str().find("world 4"), std::string::npos) << log0.str();
  EXPECT_NE(log0.str().find("MG-WFBP plan"), std::string::npos) << log0.str();
  EXPECT_TRUE(fs::exists(dir / "trace-3.json"));
  EXPECT_TRUE(fs::exists(dir / "metrics.jsonl"));
  fs::remove_all(dir);
}

// MG-WFBP plans with the network cost its config gives (dist.ssgd.alpha/beta, what `mintrain
// profile-comm` measures) instead of timing allreduces at start-up. The cost decides the plan:
// one second per message merges every gradient into one message; free messages leave one per
// parameter (the MLP has 4). Training reads no profile file: dist.comm_profile is an error that
// names the fields to use.
TEST_F(SsgdTest, TrainerPlansMgwfbpWithTheNetworkCostItsConfigGives) {
  const fs::path dir = fs::temp_directory_path() / ("mt_ssgd_config_cost_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [alpha, messages] : {std::pair{"1", 1}, std::pair{"0", 4}}) {
    std::ostringstream log0;
    run_ranks(2, [&, alpha = alpha, messages = messages](int r, std::shared_ptr<dist::ProcessGroup> g) {
      mt::testing::train_synthetic_mlp(g, r, (dir / ("out" + std::to_string(messages))).string(),
                                       {"dist.ssgd.schedule=mgwfbp", "dist.ssgd.profile_iters=2",
                                        std::string("dist.ssgd.alpha=") + alpha, "dist.ssgd.beta=1e-12"},
                                       log0);
    });
    EXPECT_NE(log0.str().find("(from the config)"), std::string::npos) << log0.str();
    EXPECT_EQ(log0.str().find("fitted at start-up"), std::string::npos) << log0.str();
    EXPECT_NE(log0.str().find("4 gradients in " + std::to_string(messages) + " messages"), std::string::npos)
        << log0.str();
  }
  std::string e;
  try {
    std::ostringstream log0;
    mt::testing::train_synthetic_mlp(nullptr, 0, (dir / "out").string(), {"dist.comm_profile=x.json"}, log0);
  } catch (const core::Error& error) {
    e = error.what();
  }
  EXPECT_NE(e.find("dist.comm_profile is no longer read by training"), std::string::npos) << e;
  EXPECT_NE(e.find("dist.ssgd.alpha and dist.ssgd.beta"), std::string::npos) << e;
  fs::remove_all(dir);
}

// ---- The same contract over real Gloo, ranks as forked processes on loopback ----

TEST_F(SsgdTest, Gloo_EverySchedule_NRanksMatchOneRankWithNTimesTheBatch) {
  constexpr int kSteps = 4;
  constexpr int64_t kRows = 16;
  for (int n : {2, 4}) {
    const auto result = mt::testing::run_ranks(n, [&](mt::testing::RankContext& c) {
      core::set_num_threads(1);
      const auto reference = train_single(kSteps, kRows);
      for (auto s : {dist::Schedule::BSP, dist::Schedule::WFBP, dist::Schedule::FUSION,
                     dist::Schedule::MGWFBP}) {
        auto model = tiny_mlp(7 + c.rank);
        auto opt = mt::testing::reference_sgd(*model);
        auto o = options(s);
        dist::SsgdSynchronizer sync(c.group, o);
        sync.setup(*model, *opt);
        const int64_t per_rank = kRows / n;
        for (int it = 0; it < kSteps; ++it) {
          sync.begin_iteration(it);
          auto [x, y] = slice(global_batch(it, kRows), c.rank * per_rank, per_rank);
          core::cross_entropy(model->forward(x), y).backward();
          mt::testing::step(sync, *opt);
          opt->zero_grad();
        }
        expect_close(mt::testing::weights_of(*model), reference, "gloo " + dist::schedule_name(s));
      }
    });
    EXPECT_TRUE(result.ok_or_report()) << n << " ranks";
  }
}
