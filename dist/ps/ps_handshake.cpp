#include "dist/ps/ps_handshake.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "dist/ps/ps_protocol.h"
#include "dist/replicas.h"

namespace mt::dist {

Tensor int64s(const std::vector<int64_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

std::vector<int64_t> int64_values(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

std::string parameter_server_name(int server, int workers) {
  return "parameter server " + std::to_string(server) + " (rank " + std::to_string(workers + server) + ")";
}

std::string parameter_server_worker_name(int worker) {
  return "worker " + std::to_string(worker) + " (rank " + std::to_string(worker) + ")";
}

ServerCommands::ServerCommands(std::shared_ptr<ProcessGroup> world, int workers)
    : world_(std::move(world)), workers_(workers) {
  const size_t servers = static_cast<size_t>(world_->size() - workers_);
  commands_.resize(servers);
  work_.resize(servers);
}

void ServerCommands::send(int64_t kind, int64_t value) {
  if (kind == ps::kStep) last_ = value;
  for (size_t s = 0; s < work_.size(); ++s) {
    const std::string what = kind == ps::kStop ? "telling it to stop" : "telling it iteration " + std::to_string(value) + " begins";
    with_server(failed_, 0, workers_, static_cast<int>(s), what, [&] {
      if (work_[s]) work_[s]->wait();
      commands_[s] = int64s({kind, value});
      work_[s] = world_->send(commands_[s], workers_ + static_cast<int>(s), ps::kCommandTag);
    });
  }
}

void ServerCommands::wait() {
  const std::string what = "telling it iteration " + std::to_string(last_) + " begins";
  for (size_t s = 0; s < work_.size(); ++s)
    with_server(failed_, 0, workers_, static_cast<int>(s), what, [&] {
      if (work_[s]) work_[s]->wait();
    });
}

void ServerCommands::stop(int64_t iterations) noexcept {
  if (failed_ || !world_) return;
  try {
    send(ps::kStop, iterations);
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker 0: could not tell the parameter servers to stop: %s\n", e.what());
  }
}

void check_worker_world(const ProcessGroup& workers, const ProcessGroup* world, const std::string& setting) {
  MT_CHECK_CONFIG(world != nullptr && world->size() > workers.size(), setting, " needs parameter servers: start "
                  "them with `mintrain launch --nservers S` (or MINTRAIN_NUM_SERVERS=S and S more ranks, "
                  "apps/README.md)");
  MT_CHECK(world->rank() == workers.rank(), "internal: worker ", workers.rank(), " is rank ", world->rank(),
           " of the world with servers; workers must be its first ranks");
}

void fail_server_gone(int worker, int workers, int server, const std::string& what, const std::exception& e) {
  MT_FAIL("worker ", worker, ": ", parameter_server_name(server, workers), " is gone or silent (", what, "): ", e.what(),
          "; stopping (the job cannot go on without it)");
}

void fail_worker_gone(int server, int workers, int worker, const std::string& what, const std::exception& e) {
  MT_FAIL(parameter_server_name(server, workers), ": ", parameter_server_worker_name(worker), " is gone or silent (",
          what, "): ", e.what(), "; stopping the server (the job cannot go on without it)");
}

PsServerTable answer_worker_hello(ProcessGroup& world, int workers, int servers, int64_t partition_bytes) {
  const int index = world.rank() - workers;
  const std::string who = parameter_server_name(index, workers);
  auto from_worker0 = [&](const std::shared_ptr<Work>& work, const std::string& what) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      fail_worker_gone(index, workers, 0, what, e);
    }
  };
  Tensor hello = Tensor::zeros({ps::kHelloNumbers}, core::DType::Int64);
  from_worker0(world.recv(hello, 0, ps::kHelloTag), "waiting for worker 0's hello at set-up");
  const std::vector<int64_t> theirs = int64_values(hello);
  const int64_t partitions = theirs[5];
  const Tensor answer = int64s({ps::kVersion, workers, servers, partition_bytes, index, partitions});
  from_worker0(world.send(answer, 0, ps::kHelloTag), "answering worker 0's hello");
  const std::string mismatch = ps::hello_mismatch(theirs, int64_values(answer));
  MT_CHECK(mismatch.empty(), who, " refuses the job: ", mismatch, ". Start workers and servers with the same "
           "config, WORLD_SIZE and MINTRAIN_NUM_SERVERS");
  MT_CHECK(partitions >= 0, who, ": worker 0 announced ", partitions, " partitions");
  PsServerTable table;
  if (partitions == 0) return table;
  Tensor numbers = Tensor::zeros({2 * partitions}, core::DType::Int64);
  from_worker0(world.recv(numbers, 0, ps::kTableTag), "waiting for the partition table");
  const std::vector<int64_t> t = int64_values(numbers);
  for (int64_t k = 0; k < partitions; ++k) {
    MT_CHECK(t[2 * k + 1] > 0 && t[2 * k + 1] * 4 <= partition_bytes, who, ": partition ", t[2 * k], " of ",
             t[2 * k + 1], " floats does not fit partition_bytes ", partition_bytes);
    table.emplace_back(t[2 * k], t[2 * k + 1]);
  }
  return table;
}

void greet_parameter_servers(ProcessGroup& workers, ProcessGroup& world, const std::vector<PsPartition>& plan,
                             int64_t partition_bytes, int64_t vote_numel, int64_t first_id) {
  // Worker 0 speaks for the workers (they agree on the config: check_replicas_agree) and greets
  // every server; servers that accepted are told to stop when another refused, so they exit at
  // once too. The other workers learn the verdict from worker 0's broadcast, so every worker stops.
  const int N = workers.size();
  const int servers = world.size() - N;
  auto server = [&](int s) { return parameter_server_name(s, N); };
  std::string refusal;
  if (workers.rank() == 0) {
    std::vector<int> accepted;
    for (int s = 0; s < servers; ++s) {
      try {
        std::vector<int64_t> table;  // {id, numel} per partition
        if (s == 0 && vote_numel > 0) table = {first_id, vote_numel};
        const int64_t first = first_id + (vote_numel > 0 ? 1 : 0);
        for (size_t k = 0; k < plan.size(); ++k)
          if (plan[k].server == s) table.insert(table.end(), {first + static_cast<int64_t>(k), plan[k].numel});
        const int64_t count = static_cast<int64_t>(table.size() / 2);
        const Tensor hello = int64s({ps::kVersion, N, servers, partition_bytes, s, count});
        Tensor answer = Tensor::zeros({ps::kHelloNumbers}, core::DType::Int64);
        auto sent = world.send(hello, N + s, ps::kHelloTag);
        auto got = world.recv(answer, N + s, ps::kHelloTag);
        finish(sent, world, "the hello to " + server(s));
        finish(got, world, "waiting for the answer of " + server(s));
        const std::string mismatch = ps::hello_mismatch(int64_values(hello), int64_values(answer));
        if (!mismatch.empty()) {
          refusal += (refusal.empty() ? "" : "; ") + server(s) + " refuses the job: " + mismatch;
          continue;
        }
        if (count > 0) finish(world.send(int64s(table), N + s, ps::kTableTag), world,
                              "sending the partition table to " + server(s));
        accepted.push_back(s);
      } catch (const std::exception& e) {
        refusal += (refusal.empty() ? "" : "; ") + std::string(e.what());
      }
    }
    if (!refusal.empty()) {
      refusal += ". Start workers and servers with the same config, WORLD_SIZE and MINTRAIN_NUM_SERVERS";
      for (int s : accepted) {
        try {
          finish(world.send(int64s({ps::kStop, 0}), N + s, ps::kCommandTag), world, "telling " + server(s) + " to stop");
        } catch (const std::exception&) {
          // The refusal is the error to report.
        }
      }
    }
  }
  Tensor verdict = Tensor::from_vector(std::vector<float>{refusal.empty() ? 0.0f : 1.0f}, {1}).to(workers.device());
  finish(workers.broadcast(verdict, 0), workers, "learning from worker 0 whether the parameter servers accepted");
  MT_CHECK(refusal.empty(), "worker 0: ", refusal);
  MT_CHECK(verdict.to(core::Device::cpu()).to_vector()[0] == 0.0f, "worker ", workers.rank(), ": the parameter servers refused the job or "
           "did not answer (worker 0's log names the server and the values)");
}

}  // namespace mt::dist
