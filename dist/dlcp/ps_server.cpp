#include "dist/dlcp/ps_server.h"

#include <algorithm>
#include <ostream>
#include <vector>

#include "core/error.h"
#include "core/strings.h"
#include "dist/dlcp/ps_worker.h"
#include "dist/ps/ps_handshake.h"
#include "dist/ps/ps_protocol.h"

namespace mt::dist::dlcp {

DlcpParameterServer::DlcpParameterServer(std::shared_ptr<ProcessGroup> world, DlcpServerOptions options)
    : world_(std::move(world)), options_(std::move(options)) {
  MT_CHECK(world_ != nullptr, "a DLCP parameter server needs the world process group");
  MT_CHECK(options_.workers >= 1 && options_.servers >= 1 && options_.workers + options_.servers == world_->size(),
           "DLCP parameter server: ", options_.workers, " workers and ", options_.servers,
           " servers do not make the world of ", world_->size(), " ranks");
  MT_CHECK(world_->rank() >= options_.workers, "DLCP parameter server: rank ", world_->rank(), " is a worker's "
           "(workers are ranks 0..", options_.workers - 1, ")");
  options_.dlcp.paths = local_paths_or_default(options_.dlcp.paths);
}

std::string DlcpParameterServer::who() const { return parameter_server_name(index(), options_.workers); }

DlcpServerStats DlcpParameterServer::run(std::ostream* log) {
  try {
    return serve(log);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind(who(), 0) == 0) throw;  // already says who
    MT_FAIL(who(), ": ", what, "; stopping the server (the job cannot go on without it)");
  }
}

DlcpServerStats DlcpParameterServer::serve(std::ostream* log) {
  const int N = options_.workers;
  const DlcpOptions& o = options_.dlcp;
  auto transport = connect_transport(*world_, o.paths, ps_exchange_options(o), o.injector, ps_agreement(o));
  for (int w = 0; w < N; ++w) transport->endpoint().set_peer_name(w, parameter_server_worker_name(w));
  for (int s = 0; s < options_.servers; ++s)
    transport->endpoint().set_peer_name(N + s, parameter_server_name(s, N));
  const PsServerTable table = answer_worker_hello(*world_, N, options_.servers, o.partition_bytes);

  DlcpServerStats stats;
  stats.partitions = static_cast<int64_t>(table.size());
  for (const auto& [id, numel] : table) stats.elements += static_cast<uint32_t>(numel);
  const uint32_t elements = stats.elements;
  const TransferShape shape{elements, o.exchange.elements_per_packet};
  if (log) {
    *log << who() << ": serving " << table.size() << " partitions (" << 4 * int64_t(elements) << " bytes, "
         << shape.packets() << " packets) for " << N << " workers over DLCP" << std::endl;
  }

  // One buffer per worker: a push lands in its own, so the sum can be taken in worker order.
  std::vector<std::vector<float>> received(static_cast<size_t>(N), std::vector<float>(elements));
  std::vector<std::vector<uint16_t>> counts(static_cast<size_t>(N), std::vector<uint16_t>(elements));
  std::vector<std::vector<uint8_t>> classes(static_cast<size_t>(N), std::vector<uint8_t>(shape.packets()));
  std::vector<std::vector<uint16_t>> layers(static_cast<size_t>(N), std::vector<uint16_t>(shape.packets()));
  std::vector<float> sums(elements);
  std::vector<uint16_t> sum_counts(elements);

  Tensor command = Tensor::zeros({2}, core::DType::Int64);
  for (;;) {
    try {
      world_->recv(command, 0, ps::kCommandTag)->wait();
    } catch (const std::exception& e) {
      MT_FAIL(who(), ": worker 0 (rank 0) is gone or silent (waiting for iteration ", stats.iterations,
              " to begin): ", e.what(), "; stopping the server (the job cannot go on without it)");
    }
    const int64_t* c = command.data<int64_t>();
    if (c[0] == ps::kStop) break;
    MT_CHECK(c[0] == ps::kStep, who(), ": worker 0 sent an unknown command ", c[0]);
    const uint32_t iteration = static_cast<uint32_t>(c[1]);
    if (elements > 0) {
      std::vector<IncomingTransfer> pushes(static_cast<size_t>(N));
      for (int w = 0; w < N; ++w) {
        const size_t i = static_cast<size_t>(w);
        std::fill(classes[i].begin(), classes[i].end(), uint8_t(0));
        std::fill(layers[i].begin(), layers[i].end(), uint16_t(0));
        IncomingTransfer& in = pushes[i];
        in.peer = w, in.iteration = iteration, in.elements = elements, in.mode = WriteMode::Overwrite;
        in.values = received[i].data(), in.counts = counts[i].data();
        in.packet_priority = classes[i].data(), in.packet_layer = layers[i].data();
      }
      stats.pushes.add(transport->exchange_all({}, pushes));

      std::copy(received[0].begin(), received[0].end(), sums.begin());
      std::copy(counts[0].begin(), counts[0].end(), sum_counts.begin());
      for (size_t w = 1; w < received.size(); ++w)
        for (uint32_t i = 0; i < elements; ++i) {
          sums[i] += received[w][i];
          sum_counts[i] = static_cast<uint16_t>(sum_counts[i] + counts[w][i]);
        }

      // Every element of a packet has the same count (a push packet arrives whole or not at all).
      OutgoingTransfer pull;
      pull.iteration = iteration, pull.values = sums.data(), pull.elements = elements;
      pull.contributors.resize(shape.packets());
      pull.priority.resize(shape.packets());
      pull.layer.resize(shape.packets());
      for (uint32_t p = 0; p < shape.packets(); ++p) {
        pull.contributors[p] = sum_counts[shape.offset_of(p)];
        for (int w = 0; w < N; ++w) {
          pull.priority[p] = std::max(pull.priority[p], classes[static_cast<size_t>(w)][p]);
          pull.layer[p] = std::max(pull.layer[p], layers[static_cast<size_t>(w)][p]);
        }
      }
      std::vector<OutgoingTransfer> pulls(static_cast<size_t>(N), pull);
      for (int w = 0; w < N; ++w) pulls[static_cast<size_t>(w)].peer = w;
      stats.pulls.add(transport->exchange_all(pulls, {}, o.lossless_pull));
    }
    ++stats.iterations;
  }
  if (log) {
    *log << who() << ": done after " << stats.iterations << " iterations, "
         << core::formatted("%.2f%% of pushed contributions lost, %llu pull retransmissions", 100 * stats.pushes.loss(),
                            static_cast<unsigned long long>(stats.pulls.retransmissions))
         << std::endl;
  }
  return stats;
}

}  // namespace mt::dist::dlcp
