#include "dist/auto/server_session.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/auto/decision.h"
#include "dist/comm/link_cost.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"
#include "dist/ps/ps_server.h"

namespace mt::dist {
ServerSession::ServerSession(std::shared_ptr<ProcessGroup> workers, std::shared_ptr<ProcessGroup> world)
    : workers_(std::move(workers)), world_(std::move(world)), last_command_(std::chrono::steady_clock::now()) {
  check_worker_world(*workers_, world_.get(), "dist.algorithm \"auto\" with servers");
}

void ServerSession::command(int64_t kind, int64_t value, const std::string& what, int64_t exchanges) {
  if (workers_->rank() != 0) return;
  const Tensor c = int64s({kind, value, exchanges});
  const int N = workers_->size();
  for (int s = 0; s < servers(); ++s)
    with_server(failed_, 0, N, s, what, [&] { world_->send(c, N + s, ps::kSessionTag)->wait(); });
  last_command_ = std::chrono::steady_clock::now();
}

void ServerSession::keep_alive() {
  if (std::chrono::steady_clock::now() - last_command_ > std::chrono::seconds(1))
    command(ps::kIdle, 0, "telling it auto runs a candidate without servers");
}

void ServerSession::serve(int64_t partition_bytes) {
  command(ps::kServe, partition_bytes, "telling it to serve a parameter-server candidate");
}

void ServerSession::end() noexcept {
  if (failed_ || workers_->rank() != 0) return;
  try {
    command(ps::kEnd, 0, "telling it the run is over");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker 0: could not tell the parameter servers to stop: %s\n", e.what());
  }
}

PsLinks ServerSession::measure_links(double max_bytes, double max_seconds) {
  const int N = workers_->size(), S = servers(), w = workers_->rank(), server = w % S;
  const LinkCost fit = fit_over_sizes(max_bytes, max_seconds, [&](int64_t floats, SizeTiming timing) {
    command(ps::kEcho, floats * 4, "asking it to echo " + std::to_string(floats * 4) + "-byte messages",
            timing.exchanges());
    Tensor out = Tensor::zeros({floats}), back = Tensor::zeros({floats});
    const double mine = median_seconds([&] {
      with_server(failed_, w, N, server, "echoing the link measurement's messages", [&] {
        auto got = world_->recv(back, N + server, ps::kEchoTag);
        world_->send(out, N + server, ps::kEchoTag)->wait();
        got->wait();
      });
    }, timing);
    // The slowest worker's round trip: a push waits for the busiest server's link.
    return static_cast<double>(agreed(*workers_, {static_cast<float>(mine)}, ReduceOp::Max)[0]);
  });
  // A round trip is two messages, each over the worker's link and its server's, which carries
  // the copies of the ceil(N / S) workers that share it.
  const double per_byte = fit.beta / (2.0 * ((N + S - 1) / S));
  return {N, S, fit.alpha / 2, per_byte, per_byte};  // latency, worker's and server's seconds per byte
}

void serve_auto_session(const ServerContext& c) {
  const int N = c.workers, index = c.world->rank() - N;
  auto wait = [&](const std::shared_ptr<Work>& work, int w, const std::string& what) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      fail_worker_gone(index, N, w, what, e);
    }
  };
  std::vector<int> mine;  // the workers whose link measurement this server echoes
  for (int w = index; w < N; w += c.servers) mine.push_back(w);
  Tensor command = Tensor::zeros({3}, core::DType::Int64);
  for (;;) {
    wait(c.world->recv(command, 0, ps::kSessionTag), 0, "waiting for auto's next command");
    const std::vector<int64_t> k = int64_values(command);
    if (k[0] == ps::kEnd) return;
    if (k[0] == ps::kServe) {
      ParameterServer(c.world, {N, c.servers, k[1]}).run(c.log);
    } else if (k[0] == ps::kEcho) {
      std::vector<Tensor> buffers;
      for (size_t i = 0; i < mine.size(); ++i) buffers.push_back(Tensor::zeros({k[1] / 4}));
      for (int64_t r = 0; r < k[2]; ++r) {  // the worker's median_seconds: warm-up and timed runs
        std::vector<std::shared_ptr<Work>> got, sent;
        for (size_t i = 0; i < mine.size(); ++i) got.push_back(c.world->recv(buffers[i], mine[i], ps::kEchoTag));
        for (size_t i = 0; i < mine.size(); ++i) {
          wait(got[i], mine[i], "its link measurement's message");
          sent.push_back(c.world->send(buffers[i], mine[i], ps::kEchoTag));
        }
        for (size_t i = 0; i < mine.size(); ++i) wait(sent[i], mine[i], "echoing its link measurement's message");
      }
    } else {
      MT_CHECK(k[0] == ps::kIdle, parameter_server_name(index, N), ": worker 0 sent an unknown command ", k[0],
               " (workers and servers of different builds?)");
    }
  }
}

}  // namespace mt::dist
