#include "dist/dlcp/ps_layout.h"

#include <algorithm>

#include "core/error.h"

namespace mt::dist::dlcp {

std::vector<ServerBuffer> server_buffers(const std::vector<PsPartition>& plan, const std::vector<int64_t>& param_numel,
                                         int servers, PriorityDirection direction) {
  std::vector<int64_t> param_begin(param_numel.size(), 0);
  for (size_t p = 1; p < param_numel.size(); ++p) param_begin[p] = param_begin[p - 1] + param_numel[p - 1];
  std::vector<ServerBuffer> buffers(static_cast<size_t>(servers));
  for (ServerBuffer& b : buffers) {
    b.layout.layers = static_cast<int>(param_numel.size());
    b.layout.direction = direction;
  }
  for (const PsPartition& part : plan) {
    MT_CHECK(part.server >= 0 && part.server < servers && part.param < param_numel.size(), "internal: partition of "
             "parameter ", part.param, " on server ", part.server);
    ServerBuffer& b = buffers[static_cast<size_t>(part.server)];
    MT_CHECK(int64_t(b.elements) + part.numel < int64_t(UINT32_MAX), "DLCP: server ", part.server, " would hold more "
             "than one transfer's 2^32 elements; start more servers");
    b.slices.push_back({param_begin[part.param] + part.offset, b.elements, static_cast<uint32_t>(part.numel)});
    b.layout.append(part.numel, static_cast<uint16_t>(std::min<size_t>(part.param, 65535)));
    b.elements += static_cast<uint32_t>(part.numel);
  }
  return buffers;
}

void gather(const ServerBuffer& b, const float* flat, float* buffer) {
  for (const ServerSlice& s : b.slices) std::copy(flat + s.flat_begin, flat + s.flat_begin + s.numel, buffer + s.buffer_begin);
}

void scatter(const ServerBuffer& b, const float* buffer, float* flat) {
  for (const ServerSlice& s : b.slices)
    std::copy(buffer + s.buffer_begin, buffer + s.buffer_begin + s.numel, flat + s.flat_begin);
}

}  // namespace mt::dist::dlcp
