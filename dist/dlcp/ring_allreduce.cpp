#include "dist/dlcp/ring_allreduce.h"

#include <algorithm>
#include <random>

#include "core/error.h"

namespace mt::dist::dlcp {
namespace {

constexpr int64_t kAddressChars = 512;  // per rank in the allgather: "job;host:port,host:port...;agreement"

std::vector<float> encode_text(const std::string& text) {
  MT_CHECK(static_cast<int64_t>(text.size()) < kAddressChars, "DLCP: too many paths to announce (",
           text.size(), " characters); list fewer dist.dlcp.paths");
  std::vector<float> out(kAddressChars, 0.0f);
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
  return out;
}

std::string decode_text(const float* chars) {
  std::string out;
  for (int64_t i = 0; i < kAddressChars && chars[i] != 0.0f; ++i) out += static_cast<char>(static_cast<int>(chars[i]));
  return out;
}

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

std::shared_ptr<Transport> connect_transport(ProcessGroup& group, const std::vector<std::string>& local_addresses,
                                             const ExchangeOptions& options, std::shared_ptr<PacketFaults> injector,
                                             const std::string& agreement) {
  MT_CHECK(agreement.find(';') == std::string::npos, "internal: a DLCP agreement text holds no ';'");
  auto endpoint = std::make_shared<DatagramEndpoint>(local_addresses);
  if (injector) endpoint->set_fault_injector(std::move(injector));
  uint32_t job = 0;
  if (group.rank() == 0) job = static_cast<uint32_t>(std::random_device{}()) | 1u;
  std::string mine = std::to_string(job);
  mine += ';';
  mine += format_paths(endpoint->local_paths());
  mine += ';';
  mine += agreement;
  Tensor input = Tensor::from_vector(encode_text(mine), {kAddressChars});
  Tensor all = Tensor::zeros({kAddressChars * group.size()});
  finish(group.allgather(input, all), group, "DLCP: exchanging the datagram endpoints' addresses");
  const float* chars = all.data<float>();
  uint32_t job_of_rank0 = 0;
  for (int r = 0; r < group.size(); ++r) {
    const std::string text = decode_text(chars + r * kAddressChars);
    const size_t semi = text.find(';'), semi2 = text.find(';', semi == std::string::npos ? 0 : semi + 1);
    MT_CHECK(semi != std::string::npos && semi2 != std::string::npos, "DLCP: rank ", r, " announced no address (\"",
             text, "\")");
    if (r == 0) job_of_rank0 = static_cast<uint32_t>(std::stoul(text.substr(0, semi)));
    const std::string theirs = text.substr(semi2 + 1);
    MT_CHECK(theirs == agreement, "DLCP: rank ", r, " runs with \"", theirs, "\" but rank ", group.rank(),
             " with \"", agreement, "\"; start every rank (workers and servers) with the same dist.dlcp");
    if (r != group.rank()) endpoint->add_peer(r, parse_paths(text.substr(semi + 1, semi2 - semi - 1)));
  }
  return std::make_shared<Transport>(endpoint, group.rank(), job_of_rank0, options);
}

uint32_t chunk_begin(uint32_t elements, int ranks, int chunk) {
  return static_cast<uint32_t>(uint64_t(elements) * uint64_t(chunk) / uint64_t(ranks));
}

uint32_t ring_loss_weight(int ranks, int step) {
  return static_cast<uint32_t>(step < ranks - 1 ? step + 1 : 2 * (ranks - 1) - step);
}

uint64_t ring_packet_ranges(uint32_t elements, int ranks, uint16_t per_packet) {
  uint64_t ranges = 0;
  for (int c = 0; c < ranks; ++c)
    ranges += TransferShape{chunk_begin(elements, ranks, c + 1) - chunk_begin(elements, ranks, c), per_packet}.packets();
  return ranges;
}

ExchangeStats ring_allreduce(Transport& transport, int rank, int ranks, float* values, uint16_t* counts,
                             uint32_t elements, uint32_t iteration, uint16_t bucket, const RingOptions& options) {
  MT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "DLCP ring: rank ", rank, " of ", ranks);
  MT_CHECK(ranks < 65536, "DLCP ring: at most 65535 ranks (count per element is 16 bits)");
  std::fill(counts, counts + elements, uint16_t(1));
  ExchangeStats total;
  if (ranks == 1 || elements == 0) return total;
  const int next = (rank + 1) % ranks, prev = mod(rank - 1, ranks);
  const uint16_t per_packet = transport.options().elements_per_packet;
  const double buffer_mean_abs = options.layout ? mean_abs(values, elements) : 0.0;
  const uint64_t ranges = ring_packet_ranges(elements, ranks, per_packet);
  const double bound = transport.options().loss_bound * double(ranges);
  LossBudget sent{bound}, received{bound};  // the next rank's (as this rank knows it) and this rank's
  int index = 0;
  auto step = [&](int send_chunk, int recv_chunk, WriteMode mode, bool reduce_scatter) {
    const uint32_t weight = ring_loss_weight(ranks, index++);
    const uint32_t sb = chunk_begin(elements, ranks, send_chunk), se = chunk_begin(elements, ranks, send_chunk + 1);
    const uint32_t rb = chunk_begin(elements, ranks, recv_chunk), re = chunk_begin(elements, ranks, recv_chunk + 1);
    OutgoingTransfer out;
    out.peer = next, out.iteration = iteration, out.bucket = bucket;
    out.values = values + sb, out.elements = se - sb;
    classify_packets(options.layout, values, counts, sb, se - sb, per_packet, buffer_mean_abs, &out);
    IncomingTransfer in;
    in.peer = prev, in.iteration = iteration, in.values = values + rb, in.counts = counts + rb;
    in.elements = re - rb, in.mode = mode;
    out.may_miss = sent.packets(weight), in.may_miss = received.packets(weight);
    const ExchangeStats s = transport.exchange(&out, &in, !reduce_scatter && options.lossless_allgather);
    sent.spend(s.unacknowledged.size(), weight);
    received.spend(s.packets_missing, weight);
    if (reduce_scatter && options.residual) {
      const TransferShape shape{se - sb, per_packet};
      for (uint32_t p : s.unacknowledged)
        for (uint32_t i = shape.offset_of(p), e = i + shape.count_of(p); i < e; ++i)
          options.residual[sb + i] += values[sb + i];
    }
    total.add(s);
  };
  // Reduce-scatter: after step s, rank r holds chunk r - s - 1 summed over s + 2 ranks.
  for (int s = 0; s < ranks - 1; ++s) step(mod(rank - s, ranks), mod(rank - s - 1, ranks), WriteMode::Add, true);
  // Allgather: rank r owns chunk r + 1 and passes the finished chunks on.
  for (int s = 0; s < ranks - 1; ++s) step(mod(rank + 1 - s, ranks), mod(rank - s, ranks), WriteMode::Overwrite, false);
  total.contributions = ranges;
  total.contributions_lost = received.spent;
  return total;
}

}  // namespace mt::dist::dlcp
