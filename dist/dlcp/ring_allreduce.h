// Ring allreduce over DLCP's transport: Gloo's N-1 reduce-scatter and N-1 allgather steps, each a
// bounded-loss exchange, keeping per element how many ranks' values it holds (a packet carries
// it in `contributors`). connect_transport finds the peers through the process group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/dlcp/packet_classes.h"
#include "dist/dlcp/transport.h"
#include "dist/comm/process_group.h"

namespace mt::dist::dlcp {

// Builds the transport of this rank: an endpoint on `local_addresses`, the peers' addresses
// and the job id exchanged over `group` (collective). `agreement` (no ';'), when not empty, is
// compared with every rank's: ranks whose settings must match (the packet size, p, the
// deadline) all fail at once, naming the rank and both texts, instead of misreading packets.
std::shared_ptr<Transport> connect_transport(ProcessGroup& group, const std::vector<std::string>& local_addresses,
                                             const ExchangeOptions& options,
                                             std::shared_ptr<PacketFaults> injector = nullptr,
                                             const std::string& agreement = "");

// The chunk of the buffer each rank reduces: [chunk_begin(c), chunk_begin(c + 1)).
uint32_t chunk_begin(uint32_t elements, int ranks, int chunk);

// The contributions a packet lost at ring step `step` costs (0..N-2 reduce-scatter, N-1..2N-3
// allgather): at reduce-scatter step s it carries the partial sum of s + 1 ranks; lost at
// allgather step s, its range's sum misses on N - 1 - s ranks (this one and those it forwards
// to), which over the N ranks' updates weighs as N - 1 - s contributions lost from the sum.
uint32_t ring_loss_weight(int ranks, int step);
// Packet ranges of the buffer (the chunks' packets): each rank's share of the N x ranges
// contributions of one allreduce, and p x ranges its budget.
uint64_t ring_packet_ranges(uint32_t elements, int ranks, uint16_t per_packet);

struct RingOptions {
  const GradientLayout* layout = nullptr;  // null: every packet class 0, layer 0
  // Sender-side error feedback: the values of this rank's reduce-scatter packets that the next
  // rank never got are added here (the caller adds them to the next exchange).
  float* residual = nullptr;
  // Allgather steps wait for every packet: every rank then ends with the same sums and counts
  // (replicas stay identical); only reduce-scatter may lose packets.
  bool lossless_allgather = false;
};

// In place over the group's ranks (rank r sends to r + 1 mod N): values become the sums,
// counts[i] the number of ranks whose value of element i is in the sum. counts is written
// (set to 1 first); both hold `elements` entries. Every rank calls it with the same elements.
// Each rank accepts losses, weighed by ring_loss_weight, while they stay within p x its share
// of the contributions, so the N ranks together lose at most p of them; a sender resends down
// to what its receiver may still miss as far as it knows (what was never acknowledged counts
// as missed, so it never leaves more than the receiver accepts). The stats' contributions are
// this rank's share and the weighted losses it accepted.
ExchangeStats ring_allreduce(Transport& transport, int rank, int ranks, float* values, uint16_t* counts,
                             uint32_t elements, uint32_t iteration, uint16_t bucket, const RingOptions& options = {});

}  // namespace mt::dist::dlcp
