#include "dist/ps/ps_server.h"

#include <functional>
#include <map>
#include <ostream>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/ps/ps_arrivals.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"

namespace mt::dist {

ParameterServer::ParameterServer(std::shared_ptr<ProcessGroup> world, PsServerOptions options)
    : world_(std::move(world)), options_(options) {
  MT_CHECK(world_ != nullptr, "a parameter server needs the world process group");
  MT_CHECK(options_.workers >= 1 && options_.servers >= 1 && options_.workers + options_.servers == world_->size(),
           "parameter server: ", options_.workers, " workers and ", options_.servers, " servers do not make the world of ",
           world_->size(), " ranks");
  MT_CHECK(world_->rank() >= options_.workers, "parameter server: rank ", world_->rank(), " is a worker's (workers are "
           "ranks 0..", options_.workers - 1, ")");
}

std::string ParameterServer::who() const { return parameter_server_name(index(), options_.workers); }

std::string ParameterServer::worker(int w) const { return parameter_server_worker_name(w); }

PsServerStats ParameterServer::run(std::ostream* log) {
  core::NoGradGuard no_grad;
  // Every wait and post below names what it was for and whom: a dead or silent worker is named.
  // (Posting fails at once when the worker's connection already broke.)
  auto gone = [&](int w, const std::string& what, const std::exception& e) {
    fail_worker_gone(index(), options_.workers, w, what, e);
  };
  auto wait_for = [&](const std::shared_ptr<Work>& work, int w, const std::string& what) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      gone(w, what, e);
    }
  };
  auto post = [&](int w, const std::string& what, const std::function<std::shared_ptr<Work>()>& op) {
    try {
      return op();
    } catch (const std::exception& e) {
      gone(w, what, e);
      throw;  // not reached: gone() throws
    }
  };

  // Handshake: each side sends what it believes, both compare (ps_handshake.h).
  const PsServerTable table = answer_worker_hello(*world_, options_.workers, options_.servers, options_.partition_bytes);
  const int64_t partitions = static_cast<int64_t>(table.size());
  PsServerStats stats;
  stats.partitions = partitions;
  std::vector<int64_t> ids, numel;
  for (const auto& [id, n] : table) {
    ids.push_back(id);
    numel.push_back(n);
  }
  if (log) {
    int64_t bytes = 0;
    for (int64_t n : numel) bytes += n * 4;
    *log << who() << ": serving " << partitions << " partitions (" << bytes << " bytes) for " << options_.workers
         << " workers" << std::endl;
  }

  const int N = options_.workers;
  const size_t P = static_cast<size_t>(partitions);
  std::map<int64_t, size_t> index_of;                     // partition id -> k
  std::vector<Tensor> received(P), sums(P), receipt(P);  // received[k]: N slices, worker w's at w * numel
  std::vector<std::vector<std::shared_ptr<Work>>> pushes(P), pulls(P);
  std::vector<std::pair<int, std::shared_ptr<Work>>> receipts;  // this iteration's, with their worker
  auto receive_next_pushes = [&](size_t k) {
    pushes[k].clear();
    for (int w = 0; w < N; ++w) {
      Tensor slice = received[k].narrow(0, w * numel[k], numel[k]);
      pushes[k].push_back(post(w, "receiving its pushes of partition " + std::to_string(ids[k]),
                               [&] { return world_->recv(slice, w, ps::push_tag(ids[k])); }));
    }
  };
  for (size_t k = 0; k < P; ++k) {
    index_of[ids[k]] = k;
    received[k] = Tensor::zeros({N * numel[k]});
    sums[k] = Tensor::zeros({numel[k]});
    receipt[k] = int64s({ids[k]});
    receive_next_pushes(k);
  }

  // Sums the N pushes of partition k in worker order and answers every worker.
  auto serve = [&](size_t k, const std::string& iteration) {
    // The previous iteration's sums of this partition must have left before they are overwritten.
    for (int w = 0; w < static_cast<int>(pulls[k].size()); ++w)
      wait_for(pulls[k][static_cast<size_t>(w)], w, "its pull of partition " + std::to_string(ids[k]));
    sums[k].copy_(received[k].narrow(0, 0, numel[k]));
    for (int w = 1; w < N; ++w) sums[k].add_(received[k].narrow(0, w * numel[k], numel[k]));
    receive_next_pushes(k);
    pulls[k].clear();
    for (int w = 0; w < N; ++w)
      pulls[k].push_back(post(w, "answering its pull of partition " + std::to_string(ids[k]) + " in " + iteration,
                              [&] { return world_->send(sums[k], w, ps::pull_tag(ids[k])); }));
    stats.pulls_answered += N;
    stats.last_answer_order.push_back(ids[k]);
  };

  // When the notes stop coming: the workers whose pushes are missing, and which partitions.
  auto missing_pushes = [&](const std::vector<std::vector<bool>>& taken) {
    std::string out;
    for (int w = 0; w < N; ++w) {
      std::vector<int64_t> missing;
      for (size_t k = 0; k < P; ++k)
        if (!taken[k][static_cast<size_t>(w)]) missing.push_back(ids[k]);
      if (missing.empty()) continue;
      out += (out.empty() ? "" : "; ") + worker(w) + " is gone or silent (no push of partition";
      for (size_t j = 0; j < missing.size() && j < 5; ++j) out += (j ? ", " : " ") + std::to_string(missing[j]);
      out += missing.size() > 5 ? ", ... " + std::to_string(missing.size()) + " in all)" : ")";
    }
    return out;
  };

  Tensor command = Tensor::zeros({2}, core::DType::Int64);
  for (;;) {
    const std::string next = "waiting for iteration " + std::to_string(stats.iterations) + " to begin";
    wait_for(post(0, next, [&] { return world_->recv(command, 0, ps::kCommandTag); }), 0, next);
    const std::vector<int64_t> c = int64_values(command);
    if (c[0] == ps::kStop) break;
    MT_CHECK(c[0] == ps::kStep, who(), ": worker 0 sent an unknown command ", c[0]);
    const std::string iteration = "iteration " + std::to_string(c[1]);
    // One note per push of this iteration (N per partition), each filled by whichever worker
    // sends next: the notes come in the order the pushes arrived, and so are partitions served.
    const size_t expected = static_cast<size_t>(N) * P;
    std::vector<std::vector<bool>> taken(P, std::vector<bool>(static_cast<size_t>(N), false));
    std::vector<int> pushes_taken(P, 0);
    stats.last_answer_order.clear();
    NoteArrivals arrivals(*world_, N, P, options_.backstop);
    for (size_t i = 0; i < expected; ++i) {
      const std::vector<int64_t> note = arrivals.next([&](int w, const std::string& why) {
        return who() + ": " + (w >= 0 ? worker(w) + " is gone or silent" : missing_pushes(taken)) + " in " + iteration +
               " (waiting for its pushes' notes): " + why + "; stopping the server (the job cannot go on without it)";
      });
      const int w = static_cast<int>(note[0]);
      const auto found = index_of.find(note[1]);
      MT_CHECK(w >= 0 && w < N && found != index_of.end() && !taken[found->second][static_cast<size_t>(w)], who(),
               ": a note names worker ", note[0], " and partition ", note[1], ", which is not a push this server "
               "expects in ", iteration, " (workers and servers of different builds?)");
      const size_t k = found->second;
      taken[k][static_cast<size_t>(w)] = true;
      // The worker sent the note after the push, on the same connection: the push is in (or nearly).
      wait_for(pushes[k][static_cast<size_t>(w)], w, "its push of partition " + std::to_string(ids[k]) + " in " + iteration);
      ++stats.pushes_received;
      stats.bytes_received += numel[k] * 4;
      if (note[2] != 0) {
        receipts.emplace_back(w, post(w, "sending the receipt of its push of partition " + std::to_string(ids[k]),
                                      [&] { return world_->send(receipt[k], w, ps::receipt_tag(ids[k])); }));
        ++stats.receipts_sent;
      }
      if (++pushes_taken[k] == N) serve(k, iteration);
    }
    for (const auto& [w, r] : receipts) wait_for(r, w, "its receipts of " + iteration);
    receipts.clear();
    ++stats.iterations;
  }
  for (size_t k = 0; k < P; ++k)
    for (int w = 0; w < static_cast<int>(pulls[k].size()); ++w)
      wait_for(pulls[k][static_cast<size_t>(w)], w, "its last pull of partition " + std::to_string(ids[k]));
  if (log) {
    *log << who() << ": done after " << stats.iterations << " iterations, " << stats.pushes_received
         << " pushes summed" << std::endl;
  }
  return stats;
}

}  // namespace mt::dist
