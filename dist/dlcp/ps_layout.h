// Where a worker's gradients go in DLCP's parameter-server form: the PS partition plan
// (dist/ps/ps_partition.h) gives each server slices of parameters; a worker packs the slices of one
// server, in plan order, into one buffer, which travels as one push transfer (and comes back as
// one pull). This file maps between the flat gradient (parameters concatenated) and those
// buffers, and gives each buffer's GradientLayout (a slice's layer is its parameter's) for the
// packet classes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dist/dlcp/packet_classes.h"
#include "dist/ps/ps_partition.h"

namespace mt::dist::dlcp {

struct ServerSlice {
  int64_t flat_begin = 0;    // first element in the flat gradient
  uint32_t buffer_begin = 0; // first element in the server's buffer
  uint32_t numel = 0;
};

struct ServerBuffer {
  std::vector<ServerSlice> slices;  // in plan (push) order
  uint32_t elements = 0;
  GradientLayout layout;
};

// One buffer per server (an empty one for a server with no partition). param_numel: the
// parameters' sizes in flat order.
std::vector<ServerBuffer> server_buffers(const std::vector<PsPartition>& plan, const std::vector<int64_t>& param_numel,
                                         int servers, PriorityDirection direction);

// flat -> buffer (gather) and buffer -> flat (scatter) for one server's slices.
void gather(const ServerBuffer& b, const float* flat, float* buffer);
void scatter(const ServerBuffer& b, const float* buffer, float* flat);
// Calls f(flat index, buffer index, count) for each piece of [begin, end) of the buffer.
template <typename F>
void for_each_piece(const ServerBuffer& b, uint32_t begin, uint32_t end, F&& f) {
  for (const ServerSlice& s : b.slices) {
    const uint32_t lo = std::max(begin, s.buffer_begin), hi = std::min(end, s.buffer_begin + s.numel);
    if (lo < hi) f(s.flat_begin + (lo - s.buffer_begin), lo, hi - lo);
  }
}

}  // namespace mt::dist::dlcp
