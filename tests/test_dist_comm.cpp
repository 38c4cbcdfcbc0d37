// The communication runtime: TCP store, launch environment, rendezvous, Gloo process groups.
// Multi-rank tests fork real processes on loopback (support/multiprocess.h).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/comm/process_group.h"
#include "dist/comm/rendezvous.h"
#include "dist/comm/socket.h"
#include "dist/comm/store_wire.h"
#include "dist/comm/tcp_store.h"
#include "support/multiprocess.h"

namespace {

using mt::core::DType;
using mt::core::Error;
using mt::core::Tensor;
using mt::dist::ReduceOp;
using mt::dist::TCPStore;
using mt::dist::TCPStoreOptions;
using mt::testing::MultiprocessOptions;
using mt::testing::RankContext;
using mt::testing::run_ranks;
using namespace std::chrono_literals;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::unique_ptr<TCPStore> host_store(std::chrono::milliseconds timeout = 2s, std::string token = "") {
  TCPStoreOptions o;
  o.port = 0;
  o.is_server = true;
  o.timeout = timeout;
  o.token = std::move(token);
  o.rank = 0;
  return std::make_unique<TCPStore>(o);
}

std::unique_ptr<TCPStore> client_of(const TCPStore& server, std::chrono::milliseconds timeout = 2s,
                                    std::string token = "") {
  TCPStoreOptions o;
  o.port = server.port();
  o.timeout = timeout;
  o.token = std::move(token);
  o.rank = 1;
  return std::make_unique<TCPStore>(o);
}

// ---------------------------------------------------------------- store

TEST(TCPStore, SetGetAddCheckWait) {
  auto server = host_store();
  auto client = client_of(*server);
  client->set("a", bytes("hello"));
  EXPECT_EQ(server->get("a"), bytes("hello"));
  EXPECT_TRUE(server->check({"a"}));
  EXPECT_FALSE(server->check({"a", "b"}));
  EXPECT_EQ(client->add("n", 2), 2);
  EXPECT_EQ(server->add("n", 5), 7);
  EXPECT_EQ(client->get("n"), bytes("7"));
  client->set("empty", {});
  EXPECT_TRUE(server->get("empty").empty());
  // wait() returns once another client sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    client->set("late", bytes("x"));
  });
  server->wait({"a", "late"});
  setter.join();
  EXPECT_EQ(server->get("late"), bytes("x"));
}

TEST(TCPStore, WaitAndGetTimeOutNamingTheKey) {
  auto server = host_store(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { server->wait({"present", "missing/1"}); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(e.find("timed out"), std::string::npos) << e;
  EXPECT_NE(e.find("missing/1"), std::string::npos) << e;
  const std::string g = error_of([&] { server->get("nope"); });
  EXPECT_NE(g.find("\"nope\""), std::string::npos) << g;
  // The connection still works after a timeout.
  server->set("k", bytes("v"));
  EXPECT_EQ(server->get("k"), bytes("v"));
}

TEST(TCPStore, UnreachableStoreSaysWhatToCheck) {
  TCPStoreOptions o;
  o.port = mt::testing::free_port();
  o.timeout = 400ms;
  o.rank = 3;
  const std::string e = error_of([&] { TCPStore s(o); });
  EXPECT_NE(e.find("rank 3: could not reach the store at 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("is rank 0 running? check MASTER_ADDR/MASTER_PORT"), std::string::npos) << e;
}

// Sends raw bytes to the server and returns its answer's status byte and message (or "closed").
std::string raw_exchange(int port, const std::vector<uint8_t>& data) {
  std::string err;
  const auto deadline = mt::dist::net::Clock::now() + 2s;
  int fd = mt::dist::net::connect_until("127.0.0.1", port, deadline, &err);
  EXPECT_GE(fd, 0) << err;
  mt::dist::net::send_all(fd, data.data(), data.size(), deadline);
  std::string answer;
  try {
    uint32_t n = 0;
    mt::dist::net::recv_all(fd, &n, 4, deadline);
    std::vector<uint8_t> payload(n);
    mt::dist::net::recv_all(fd, payload.data(), n, deadline);
    mt::dist::wire::Reader r(payload.data(), payload.size());
    const uint8_t status = r.u8();
    answer = status == mt::dist::wire::kError ? "error: " + r.str() : "status " + std::to_string(status);
  } catch (const Error& e) {
    answer = std::string("closed: ") + e.what();
  }
  mt::dist::net::close_fd(fd);
  return answer;
}

TEST(TCPStore, ServerSurvivesGarbageAndOversizedMessages) {
  auto server = host_store();
  auto client = client_of(*server);
  client->set("before", bytes("1"));
  using mt::dist::wire::Writer;
  // Not authenticated: SET before HELLO.
  EXPECT_NE(raw_exchange(server->port(), Writer().u8(mt::dist::wire::kSet).str("k").str("v").frame())
                .find("the first request must be HELLO"),
            std::string::npos);
  // Unknown op after a valid HELLO.
  auto hello = Writer().u8(mt::dist::wire::kHello).str("").frame();
  auto junk = Writer().u8(200).u32(7).frame();
  hello.insert(hello.end(), junk.begin(), junk.end());
  const std::string unknown = raw_exchange(server->port(), hello);
  EXPECT_NE(unknown.find("status 0"), std::string::npos) << unknown;  // HELLO's reply comes first
  // A truncated field: SET whose value length lies.
  auto lying = Writer().u8(mt::dist::wire::kHello).str("").frame();
  auto bad = Writer().u8(mt::dist::wire::kSet).str("k").u32(1000).frame();
  lying.insert(lying.end(), bad.begin(), bad.end());
  raw_exchange(server->port(), lying);
  // A header announcing 1 GiB: refused without reading it.
  std::vector<uint8_t> huge(4);
  const uint32_t big = 1u << 30;
  std::memcpy(huge.data(), &big, 4);
  const std::string over = raw_exchange(server->port(), huge);
  EXPECT_NE(over.find("over the store's limit"), std::string::npos) << over;
  // Random bytes.
  std::vector<uint8_t> noise(64);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 37 + 11);
  raw_exchange(server->port(), noise);
  // The server still serves, and kept its data.
  EXPECT_EQ(client->get("before"), bytes("1"));
  auto again = client_of(*server);
  again->set("after", bytes("2"));
  EXPECT_EQ(client->get("after"), bytes("2"));
  // The client refuses values over the limit before sending them.
  std::vector<uint8_t> too_big(TCPStore::kMaxValueBytes + 1);
  const std::string e = error_of([&] { client->set("big", too_big); });
  EXPECT_NE(e.find("over the store's limit"), std::string::npos) << e;
}

TEST(TCPStore, TokenMismatchIsRejected) {
  auto server = host_store(2s, "secret-a");
  EXPECT_NO_THROW(client_of(*server, 2s, "secret-a"));
  const std::string e = error_of([&] { client_of(*server, 2s, "secret-b"); });
  EXPECT_NE(e.find("rejected"), std::string::npos) << e;
  EXPECT_NE(e.find("MINTRAIN_JOB_TOKEN"), std::string::npos) << e;
}

TEST(TCPStore, ManyRanksCountAndWait) {
  MultiprocessOptions o;
  o.create_group = false;
  EXPECT_TRUE(run_ranks(4, [](RankContext& c) {
                c.store->add("count", 1);
                c.store->set("rank/" + std::to_string(c.rank), bytes(std::to_string(c.rank * 10)));
                c.store->wait({"rank/0", "rank/1", "rank/2", "rank/3"});
                EXPECT_EQ(c.store->get("rank/" + std::to_string((c.rank + 1) % 4)),
                          bytes(std::to_string(((c.rank + 1) % 4) * 10)));
                EXPECT_GE(c.store->add("count", 0), 4);
              }, o).ok_or_report());
}

// ---------------------------------------------------------------- launch environment

class Env : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                          "SLURM_TASKS_PER_NODE", "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
      ::unsetenv(v);
    }
  }
  static void set(const char* k, const char* v) { ::setenv(k, v, 1); }
};

TEST_F(Env, NoVariablesIsOneProcess) {
  const auto w = mt::dist::world_from_env();
  EXPECT_EQ(w.source, "none");
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
}

TEST_F(Env, Torchrun) {
  set("RANK", "3"), set("WORLD_SIZE", "8"), set("LOCAL_RANK", "1"), set("LOCAL_WORLD_SIZE", "2");
  set("MASTER_ADDR", "10.1.2.3"), set("MASTER_PORT", "1234");
  const auto w = mt::dist::world_from_env();
  EXPECT_EQ(w.source, "torchrun");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.master_addr, "10.1.2.3");
  EXPECT_EQ(w.master_port, 1234);
}

TEST_F(Env, Slurm) {
  set("SLURM_PROCID", "5"), set("SLURM_NTASKS", "8"), set("SLURM_LOCALID", "1");
  set("SLURM_TASKS_PER_NODE", "4(x2)"), set("SLURM_JOB_NODELIST", "gpu[07-08]");
  auto w = mt::dist::world_from_env();
  EXPECT_EQ(w.source, "slurm");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "gpu07");
  EXPECT_EQ(w.master_port, 29500);
  set("SLURM_JOB_NODELIST", "alpha,beta");
  EXPECT_EQ(mt::dist::world_from_env().master_addr, "alpha");
  set("SLURM_JOB_NODELIST", "a[1-2],b[3-4]");
  const std::string e = error_of([] { mt::dist::world_from_env(); });
  EXPECT_NE(e.find("export MASTER_ADDR"), std::string::npos) << e;
  set("MASTER_ADDR", "head");
  EXPECT_EQ(mt::dist::world_from_env().master_addr, "head");
}

TEST_F(Env, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "2"), set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "2"), set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  const auto w = mt::dist::world_from_env();
  EXPECT_EQ(w.source, "mpi");
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
}

TEST_F(Env, BadValuesAreExplained) {
  set("RANK", "abc"), set("WORLD_SIZE", "2");
  EXPECT_NE(error_of([] { mt::dist::world_from_env(); }).find("RANK=\"abc\" is not an integer"), std::string::npos);
  set("RANK", "2");
  EXPECT_NE(error_of([] { mt::dist::world_from_env(); }).find("rank 2 is outside the world of 2"), std::string::npos);
  set("RANK", "0"), set("MASTER_PORT", "70000");
  EXPECT_NE(error_of([] { mt::dist::world_from_env(); }).find("MASTER_PORT"), std::string::npos);
  ::unsetenv("WORLD_SIZE");
  EXPECT_NE(error_of([] { mt::dist::world_from_env(); }).find("WORLD_SIZE is not"), std::string::npos);
}

// ---------------------------------------------------------------- rendezvous

TEST(Rendezvous, TimeoutNamesTheMissingRanks) {
  MultiprocessOptions o;
  o.create_store = false;
  const auto result = run_ranks(4, [](RankContext& c) {
    if (c.rank == 2 || c.rank == 3) return;  // never arrive
    mt::dist::WorldInfo w;
    w.rank = c.rank, w.world_size = 4, w.local_rank = c.rank, w.local_world_size = 4;
    w.master_port = c.port;
    mt::dist::ProcessGroupOptions po = mt::testing::test_group_options();
    po.timeout = 1500ms;
    const std::string e = error_of([&] { mt::dist::rendezvous(w, po); });
    EXPECT_NE(e.find("waiting for rank(s) 2, 3 of 4"), std::string::npos) << e;
  }, o);
  EXPECT_TRUE(result.ok_or_report());
}

TEST(Rendezvous, WrongPortSaysWhoItWaitsForLongBeforeTheTimeout) {
  // Rank 1 of 2 at a port where nothing listens (a wrong MASTER_PORT): a waiting line every
  // report interval, then the error naming the address.
  mt::dist::WorldInfo w;
  w.rank = 1, w.world_size = 2, w.local_rank = 1, w.local_world_size = 2;
  w.master_port = mt::testing::free_port();
  mt::dist::ProcessGroupOptions po = mt::testing::test_group_options();
  po.timeout = 1500ms;
  ::testing::internal::CaptureStderr();
  const std::string e = error_of([&] { mt::dist::rendezvous(w, po, 400ms); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string at = "127.0.0.1:" + std::to_string(w.master_port);
  EXPECT_NE(err.find("rank 1: waiting for rank 0 at " + at + ", 0.4/1.5 s"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1: waiting for rank 0 at " + at + ", 0.8/1.5 s"), std::string::npos) << err;
  EXPECT_NE(err.find("Connection refused"), std::string::npos) << err;
  EXPECT_NE(e.find("could not reach the store at " + at + " after 1.5 s"), std::string::npos) << e;
}

TEST(Rendezvous, HostSaysWhichRanksItWaitsFor) {
  mt::dist::WorldInfo w;
  w.rank = 0, w.world_size = 3, w.local_rank = 0, w.local_world_size = 3;
  w.master_port = mt::testing::free_port();
  mt::dist::ProcessGroupOptions po = mt::testing::test_group_options();
  po.timeout = 1s;
  ::testing::internal::CaptureStderr();
  const std::string e = error_of([&] { mt::dist::rendezvous(w, po, 300ms); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rank 0: waiting for rank(s) 1, 2 at 127.0.0.1:" + std::to_string(w.master_port) + ", 0.3/1 s"),
            std::string::npos) << err;
  EXPECT_NE(e.find("waiting for rank(s) 1, 2 of 3"), std::string::npos) << e;
}

TEST(Rendezvous, WorldSizeMismatchIsReported) {
  MultiprocessOptions o;
  o.create_store = false;
  EXPECT_TRUE(run_ranks(2, [](RankContext& c) {
                mt::dist::WorldInfo w;
                w.rank = c.rank, w.world_size = c.rank == 0 ? 2 : 3, w.local_world_size = w.world_size;
                w.local_rank = c.rank;
                w.master_port = c.port;
                mt::dist::ProcessGroupOptions po = mt::testing::test_group_options();
                po.timeout = 3s;
                const std::string e = error_of([&] { mt::dist::rendezvous(w, po); });
                EXPECT_NE(e.find("WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"), std::string::npos) << e;
                if (c.rank == 0) std::this_thread::sleep_for(1s);  // keep the store up for rank 1
              }, o).ok_or_report());
}

TEST(Rendezvous, FullJobGetsAWorkingGroup) {
  MultiprocessOptions o;
  o.create_store = false;
  EXPECT_TRUE(run_ranks(3, [](RankContext& c) {
                mt::dist::WorldInfo w;
                w.rank = c.rank, w.world_size = 3, w.local_rank = c.rank, w.local_world_size = 3;
                w.master_port = c.port;
                auto rv = mt::dist::rendezvous(w, mt::testing::test_group_options());
                ASSERT_EQ(rv.group->size(), 3);
                Tensor t = Tensor::full({5}, 1.0);
                rv.group->allreduce(t)->wait();
                EXPECT_EQ(t.to_vector()[4], 3.0f);
                rv.group->barrier();  // nobody leaves while rank 0's store is still needed
              }, o).ok_or_report());
}

// ---------------------------------------------------------------- collectives

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchComputedResults) {
  const int n = GetParam();
  EXPECT_TRUE(run_ranks(n, [n](RankContext& c) {
                auto& g = *c.group;
                ASSERT_EQ(g.rank(), c.rank);
                ASSERT_EQ(g.size(), n);
                EXPECT_EQ(g.backend(), "gloo");
                // allreduce sum/max/min on float32 (odd size: ring chunks of unequal length).
                const int64_t len = 1001;
                auto make = [&](int rank) {
                  std::vector<float> v(len);
                  for (int64_t i = 0; i < len; ++i) v[i] = static_cast<float>((rank + 1) * (i % 7) - rank);
                  return v;
                };
                for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
                  Tensor t = Tensor::from_vector(make(c.rank), {len});
                  g.allreduce(t, op)->wait();
                  const auto got = t.to_vector();
                  for (int64_t i = 0; i < len; ++i) {
                    float want = op == ReduceOp::Sum ? 0.f : make(0)[i];
                    for (int r = 0; r < n; ++r) {
                      const float v = make(r)[i];
                      want = op == ReduceOp::Sum ? want + v : op == ReduceOp::Max ? std::max(want, v) : std::min(want, v);
                    }
                    ASSERT_EQ(got[i], want) << "op " << static_cast<int>(op) << " at " << i;
                  }
                }
                // int64 sum.
                Tensor ti = Tensor::from_vector(std::vector<int64_t>{c.rank, 100}, {2});
                g.allreduce(ti)->wait();
                EXPECT_EQ(ti.data<int64_t>()[0], n * (n - 1) / 2);
                EXPECT_EQ(ti.data<int64_t>()[1], 100 * n);
                // broadcast from the last rank.
                Tensor b = Tensor::full({300}, c.rank == n - 1 ? 42.0 : -1.0);
                g.broadcast(b, n - 1)->wait();
                EXPECT_EQ(b.to_vector()[299], 42.0f);
                // allgather.
                Tensor in = Tensor::full({3}, c.rank);
                Tensor out = Tensor::zeros({3 * n});
                g.allgather(in, out)->wait();
                for (int r = 0; r < n; ++r) EXPECT_EQ(out.to_vector()[3 * r + 2], static_cast<float>(r));
                // allgatherv: rank r contributes r+1 values (r, r, ...).
                std::vector<int64_t> counts;
                for (int r = 0; r < n; ++r) counts.push_back(r + 1);
                Tensor vin = Tensor::full({c.rank + 1}, c.rank);
                Tensor vout = Tensor::zeros({n * (n + 1) / 2});
                g.allgatherv(vin, vout, counts)->wait();
                std::vector<float> want;
                for (int r = 0; r < n; ++r) want.insert(want.end(), r + 1, static_cast<float>(r));
                EXPECT_EQ(vout.to_vector(), want);
                // reduce_scatter: block b of rank r holds r*10 + b; rank r gets block r summed.
                const int64_t block = 257;
                std::vector<float> rs(static_cast<size_t>(block * n));
                for (int bl = 0; bl < n; ++bl)
                  for (int64_t i = 0; i < block; ++i) rs[bl * block + i] = static_cast<float>(c.rank * 10 + bl + i);
                Tensor rin = Tensor::from_vector(rs, {block * n});
                Tensor rout = Tensor::zeros({block});
                g.reduce_scatter(rin, rout)->wait();
                const auto rv = rout.to_vector();
                for (int64_t i = 0; i < block; ++i) {
                  float w = 0;
                  for (int r = 0; r < n; ++r) w += static_cast<float>(r * 10 + c.rank + i);
                  ASSERT_EQ(rv[i], w) << i;
                }
                EXPECT_EQ(rin.to_vector(), rs);  // the input is left alone
                g.barrier();
              }).ok_or_report());
}

TEST_P(Collectives, ManyOperationsInFlightCompleteInOrder) {
  const int n = GetParam();
  EXPECT_TRUE(run_ranks(n, [n](RankContext& c) {
                std::vector<Tensor> ts;
                std::vector<std::shared_ptr<mt::dist::Work>> works;
                for (int i = 0; i < 40; ++i) {
                  ts.push_back(Tensor::full({1 + i * 997 % 5000}, c.rank + i));
                  works.push_back(i % 5 == 4 ? c.group->broadcast(ts.back(), i % n) : c.group->allreduce(ts.back()));
                }
                works.back()->wait();
                // FIFO: once the last one is done, every earlier one is done too.
                for (auto& w : works) EXPECT_TRUE(w->is_completed());
                for (int i = 39; i >= 0; --i) works[static_cast<size_t>(i)]->wait();
                for (int i = 0; i < 40; ++i) {
                  const float want = i % 5 == 4 ? static_cast<float>(i % n + i)
                                                : static_cast<float>(n * (n - 1) / 2 + n * i);
                  EXPECT_EQ(ts[static_cast<size_t>(i)].to_vector().back(), want) << i;
                }
              }).ok_or_report());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(ProcessGroup, SubgroupsAreCachedAndCorrect) {
  EXPECT_TRUE(run_ranks(4, [](RankContext& c) {
                const int r = c.rank;
                const std::vector<int> pair = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
                const std::vector<int> cross = (r == 0 || r == 3) ? std::vector<int>{0, 3} : std::vector<int>{1, 2};
                auto a = c.group->subgroup(pair);
                auto b = c.group->subgroup(cross);
                EXPECT_EQ(a, c.group->subgroup(pair));  // cached
                EXPECT_EQ(a->size(), 2);
                EXPECT_EQ(b->rank(), r == 0 || r == 1 ? 0 : 1);
                EXPECT_NE(b->describe().find(r == 0 || r == 3 ? "{0,3}" : "{1,2}"), std::string::npos) << b->describe();
                Tensor t = Tensor::full({10}, r);
                a->allreduce(t)->wait();
                EXPECT_EQ(t.to_vector()[0], r < 2 ? 1.0f : 5.0f);
                Tensor u = Tensor::full({10}, r);
                b->allreduce(u)->wait();
                EXPECT_EQ(u.to_vector()[9], 3.0f);
                // The world group still works alongside.
                Tensor w = Tensor::full({3}, 1.0);
                c.group->allreduce(w)->wait();
                EXPECT_EQ(w.to_vector()[0], 4.0f);
                // Bad requests.
                EXPECT_NE(error_of([&] { c.group->subgroup({1, 0}); }).find("sorted"), std::string::npos);
                EXPECT_NE(error_of([&] { c.group->subgroup({(r + 1) % 4}); }).find("does not include this rank"),
                          std::string::npos);
              }).ok_or_report());
}

// Two world groups of one job on the same store (e.g. one for Gloo's own classes beside ours)
// must get their own meshes and never mix up each other's messages, even with both busy at once.
TEST(ProcessGroup, SecondWorldGroupOnTheSameStoreIsIndependent) {
  EXPECT_TRUE(run_ranks(4, [](RankContext& c) {
                auto second = mt::dist::create_process_group(c.store, c.rank, c.size,
                                                             mt::testing::test_group_options());
                EXPECT_EQ(second->size(), 4);
                EXPECT_EQ(second->rank(), c.rank);
                Tensor a = Tensor::full({1 << 18}, c.rank + 1);  // 1 MiB: a segmented ring
                Tensor b = Tensor::full({1 << 18}, 100 * (c.rank + 1));
                Tensor root = Tensor::full({1000}, c.rank);
                auto wa = c.group->allreduce(a);
                auto wb = second->allreduce(b);
                auto wr = second->broadcast(root, 2);
                wb->wait();
                wa->wait();
                wr->wait();
                EXPECT_EQ(a.to_vector().front(), 10.0f);
                EXPECT_EQ(a.to_vector().back(), 10.0f);
                EXPECT_EQ(b.to_vector().front(), 1000.0f);
                EXPECT_EQ(b.to_vector().back(), 1000.0f);
                EXPECT_EQ(root.to_vector().back(), 2.0f);
                second->barrier();
                c.group->barrier();
              }).ok_or_report());
}

TEST(ProcessGroup, DeadPeerFailsTheOthersWithinTheTimeout) {
  MultiprocessOptions o;
  o.group.timeout = 3s;
  const auto result = run_ranks(3, [](RankContext& c) {
    Tensor t = Tensor::full({1 << 20}, 1.0);
    c.group->allreduce(t)->wait();
    if (c.rank == 1) {
      // Leave in the middle of the next collective.
      Tensor big = Tensor::full({1 << 22}, 1.0);
      c.group->allreduce(big);
      std::this_thread::sleep_for(5ms);
      ::_exit(0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Tensor big = Tensor::full({1 << 22}, 1.0);
    const std::string e = error_of([&] { c.group->allreduce(big)->wait(); });
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(took, 3s + 2500ms);
    EXPECT_NE(e.find("allreduce"), std::string::npos) << e;
    EXPECT_NE(e.find("rank " + std::to_string(c.rank) + " of gloo/tcp world of 3"), std::string::npos) << e;
    // Later operations fail at once, naming the first failure.
    const auto t1 = std::chrono::steady_clock::now();
    const std::string later = error_of([&] { c.group->barrier(); });
    EXPECT_NE(later.find("broken"), std::string::npos) << later;
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 1s);
  }, o);
  EXPECT_TRUE(result.ok_or_report());
}

TEST(ProcessGroup, IbverbsWithoutDeviceGivesAClearError) {
  auto store = std::shared_ptr<TCPStore>(host_store().release());
  mt::dist::ProcessGroupOptions o = mt::testing::test_group_options();
  o.transport = "ibverbs";
  const std::string e = error_of([&] { mt::dist::create_process_group(store, 0, 1, o); });
  EXPECT_NE(e.find("no ibverbs device found: use transport tcp"), std::string::npos) << e;
  o.transport = "carrier-pigeon";
  EXPECT_NE(error_of([&] { mt::dist::create_process_group(store, 0, 1, o); }).find("unknown Gloo transport"),
            std::string::npos);
  o.transport = "tcp";
  o.backend = "nccl";
  EXPECT_NE(error_of([&] { mt::dist::create_process_group(store, 0, 1, o); }).find("nccl"), std::string::npos);
}

TEST(ProcessGroup, SingleRankAndBadArguments) {
  auto store = std::shared_ptr<TCPStore>(host_store().release());
  auto g = mt::dist::create_process_group(store, 0, 1, mt::testing::test_group_options());
  EXPECT_EQ(g->describe(), "gloo/tcp world of 1");
  Tensor t = Tensor::full({4}, 2.0);
  g->allreduce(t)->wait();
  EXPECT_EQ(t.to_vector()[0], 2.0f);
  Tensor out = Tensor::zeros({5});
  EXPECT_NE(error_of([&] { g->allgather(t, out); }).find("expected 1 x 4"), std::string::npos);
  Tensor nc = Tensor::zeros({4, 4}).transpose(0, 1);
  EXPECT_NE(error_of([&] { g->allreduce(nc); }).find("contiguous"), std::string::npos);
  Tensor rs_out = Tensor::zeros({4});
  g->reduce_scatter(t, rs_out)->wait();
  EXPECT_EQ(rs_out.to_vector()[3], 2.0f);
  g->barrier();
}

}  // namespace

// ---------------------------------------------------------------- a hung rank is named

namespace {

// The state letter of /proc/PID/stat ('T' = stopped), or 0 when the process is gone.
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

// Rank `stopped` publishes its pid and waits; the other rank stops it (SIGSTOP, as a debugger
// would) and waits until it really is stopped. Its allreduce then times out and the error must
// name the stopped rank. Then it wakes the stopped rank (SIGCONT) and lets it end. The stopped
// rank never stops itself: when it hosts the store, stopping right after a store call could
// freeze the store before it answered the peer, and the peer's next call would fail instead.
void expect_stopped_rank_named(int stopped, const std::string& expected) {
  MultiprocessOptions o;
  o.group.timeout = 2s;
  o.timeout = 40s;
  EXPECT_TRUE(run_ranks(2, [stopped, expected](RankContext& c) {
                const std::string pid = std::to_string(::getpid());
                c.store->set("test/pid/" + std::to_string(c.rank), bytes(pid));
                if (c.rank == stopped) {
                  c.store->with_timeout(30s)->wait({"test/done"});  // stopped and woken meanwhile
                  return;
                }
                const auto v = c.store->get("test/pid/" + std::to_string(stopped));
                const pid_t other = std::stoi(std::string(v.begin(), v.end()));
                ::kill(other, SIGSTOP);
                const auto deadline = std::chrono::steady_clock::now() + 20s;
                while (process_state(other) != 'T' && std::chrono::steady_clock::now() < deadline) {
                  std::this_thread::sleep_for(10ms);
                }
                ASSERT_EQ(process_state(other), 'T') << "rank " << stopped << " did not stop within 20 s";
                Tensor t = Tensor::full({16}, 1.0);
                const std::string e = error_of([&] { c.group->allreduce(t)->wait(); });
                ::kill(other, SIGCONT);
                c.store->set("test/done", bytes("1"));
                EXPECT_NE(e.find("timed out after 2 s waiting for a peer"), std::string::npos) << e;
                EXPECT_NE(e.find(expected), std::string::npos) << e;
              }, o).ok_or_report());
}

}  // namespace

TEST(HungRank, TimeoutNamesTheStoppedRank) {
  expect_stopped_rank_named(1, "rank(s) 1 did not answer");
}

TEST(HungRank, TimeoutNamesTheStoppedStoreHost) {
  expect_stopped_rank_named(0, "the store's host, rank 0, does not answer either");
}
