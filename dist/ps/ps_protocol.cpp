#include "dist/ps/ps_protocol.h"

namespace mt::dist::ps {

std::string hello_mismatch(const std::vector<int64_t>& worker0, const std::vector<int64_t>& server) {
  if (worker0.size() != server.size()) return "the handshake messages differ in length";
  // The partition count is the workers' to say (the server learns it from the hello).
  const char* names[] = {"protocol version", "workers", "servers", "partition_bytes", "server index"};
  std::string out;
  for (size_t i = 0; i < 5 && i < worker0.size(); ++i) {
    if (worker0[i] == server[i]) continue;
    out += (out.empty() ? "" : "; ") + std::string(names[i]) + ": the workers have " + std::to_string(worker0[i]) +
           ", the server " + std::to_string(server[i]);
  }
  return out;
}

}  // namespace mt::dist::ps
