// The wire between the workers and the parameter servers (docs/algorithms.md). One Gloo world
// holds both: workers are ranks 0..N-1, server s is rank N+s (dist/comm/rendezvous.h). Every message
// is a tensor on a tag of that world's point-to-point slots:
//
//   hello     worker 0 -> server s   int64 {version, workers, servers, partition_bytes, s, partitions of s}
//   answer    server s -> worker 0   the same six numbers as the server sees them; both sides
//                                    compare and refuse a mismatch naming both values
//   table     worker 0 -> server s   int64 {partition id, numel} per partition of s
//   command   worker 0 -> server s   int64 {kStep, iteration} before each iteration's pushes, or
//                                    {kStop, iterations} when training ends
//   push      worker w -> server s   float32: worker w's gradient slice of partition k
//   note      worker w -> server s   int64 {w, k, receipt wanted}: sent right after the push of k,
//                                    so it arrives behind the push's bytes; the server takes the
//                                    notes of all workers in the order they come (ps_arrivals.h),
//                                    which is the pushes' arrival order, and serves partitions so
//   receipt   server s -> worker w   int64 {k}: the server has taken w's push of k (only when the
//                                    note asked for it: ByteScheduler's credit comes back then)
//   pull      server s -> worker w   float32: the sum of the N pushes of partition k
//
// dist.algorithm "auto" keeps its servers between parameter-server candidates (dist/auto/):
//   session   worker 0 -> server s   int64 {kIdle, 0, 0} while another candidate runs (the servers'
//                                    wait keeps the world's timeout), {kServe, partition_bytes, 0}
//                                    (the hello above follows), {kEcho, bytes, exchanges} or {kEnd, 0, 0}
//   echo      worker w <-> server s  float32: the link measurement's message and its copy back
//
// Pushes, receipts and pulls of partition k have tags of their own, so messages of different
// partitions never meet, and one tag's messages between two ranks arrive in order (iteration
// after iteration).
#pragma once
#include <cstdint>

namespace mt::dist::ps {

inline constexpr int64_t kVersion = 2;  // 2: arrival notes and receipts
inline constexpr int64_t kHelloNumbers = 6;  // version, workers, servers, partition_bytes, server, partitions
inline constexpr int64_t kStep = 1;
inline constexpr int64_t kStop = 2;

inline constexpr uint32_t kHelloTag = 0;
inline constexpr uint32_t kTableTag = 1;
inline constexpr uint32_t kCommandTag = 2;
inline constexpr uint32_t kNoteTag = 3;
inline constexpr int64_t kNoteNumbers = 3;  // worker, partition, receipt wanted
inline constexpr uint32_t kSessionTag = 4;
inline constexpr uint32_t kEchoTag = 5;
inline constexpr int64_t kIdle = 3, kServe = 4, kEcho = 5, kEnd = 6;  // session commands
inline uint32_t push_tag(int64_t partition) { return 16 + 3 * static_cast<uint32_t>(partition); }
inline uint32_t pull_tag(int64_t partition) { return 17 + 3 * static_cast<uint32_t>(partition); }
inline uint32_t receipt_tag(int64_t partition) { return 18 + 3 * static_cast<uint32_t>(partition); }

}  // namespace mt::dist::ps

#include <string>
#include <vector>

namespace mt::dist::ps {

// "" when worker 0's hello and server s's answer agree, else what differs with both values
// ("partition_bytes: workers 4194304, server 1 1048576; ..."): the refusal both sides throw.
std::string hello_mismatch(const std::vector<int64_t>& worker0, const std::vector<int64_t>& server);

}  // namespace mt::dist::ps
