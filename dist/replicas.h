// Keeping replicas identical at start-up: every data-parallel algorithm begins by checking that
// all ranks run the same model and config, then makes sure every rank holds rank 0's weights
// (comparing digests, broadcasting only when they differ). Shared by every synchronizer.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/serialize.h"
#include "dist/comm/process_group.h"
#include "dist/flat.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace mt::dist {

// The mean of `value` over the group's ranks (collective), sent as a float32 high part and its
// rounding remainder (the collectives sum float32): each rank's value travels to about 48 bits,
// and the sums over ranks round as float32 sums do. The one metric average.
// Every helper here stages host values on the group's device (ProcessGroup::device()): the
// same call works on Gloo and on NCCL.
double mean_over_ranks(ProcessGroup& group, double value);

// Every rank contributes a hash of its config text and of its parameter names and shapes
// (allgather); if any rank differs from rank 0, every rank throws the same Error naming the
// differing ranks. Must run before any collective whose sizes depend on the model.
void check_replicas_agree(ProcessGroup& group, const layers::Module& model,
                          const std::string& config_text);

// Copies the root's parameters and buffers into every rank's model (float32 tensors as one
// flattened broadcast, others one by one), through the group's device whatever the model's.
void broadcast_parameters(ProcessGroup& group, const layers::Module& model, int root = 0);
void broadcast_buffers(ProcessGroup& group, const layers::Module& model, int root = 0);

// ---- The same starting weights on every rank ----
// Every rank builds its model from the config's seed, so the replicas normally start identical
// and sending rank 0's model would only load the network (on a slow uplink, several fresh TCP
// flows of a whole model at once overflow the switch buffer). Instead the ranks compare a digest
// of their weights (8 bytes each) and broadcast only when some rank differs.

// A 64-bit hash over the bytes of every parameter and buffer, in the model's order. Equal
// weights give equal digests on every rank and build; -0.0 and 0.0 (or two NaN encodings)
// differ, which at worst costs a broadcast.
uint64_t weights_digest(const layers::Module& model);

enum class StartingWeights { AlreadyIdentical, Broadcast };

// Collective, after check_replicas_agree. Allgathers every rank's weights_digest; when all equal
// rank 0's nothing else travels, otherwise rank 0's parameters and buffers are broadcast. With the
// racks known (rack_of[r]: rank r's rack id, one per rank; empty = unknown) the broadcast crosses
// every rack boundary once: rank 0 to one representative per rack (the lowest rank of each), then
// inside every rack, on start-up communicators released afterwards. Rank 0 writes one line to
// `log` saying which happened. Every rank returns the same answer.
StartingWeights make_replicas_identical(ProcessGroup& group, const layers::Module& model,
                                        const std::vector<int>& rack_of = {}, std::ostream* log = nullptr);

// ---- Per-rank state in checkpoints ----
// Only rank 0 writes checkpoints, but algorithms whose ranks hold different state (DS-Sync's
// local models and optimizers, CD-SGD's local weights and residuals) need every rank's for an
// exact resume. Before a checkpoint every rank sends its state to rank 0 (in the archive
// format, checksummed: core/serialize.h), which stores all of them under
// "<prefix>ranks" (the world size) and "<prefix>rank<r>.<name>"; on resume each rank takes its
// own back. The cost is one broadcast per rank of that rank's state, and rank 0 holding N
// states in memory until the checkpoint is written.

// Collective. Rank 0 gets every rank's `mine` in rank order; the others get an empty vector.
// The bytes travel on the group's device (ProcessGroup::device()).
std::vector<core::StateDict> gather_states_to_rank0(ProcessGroup& group, const core::StateDict& mine,
                                                    const std::string& what);
void append_rank_states(core::StateDict& out, const std::string& prefix,
                        const std::vector<core::StateDict>& states);
// The per-rank states of the next checkpoint, as the synchronizers keep them: collected once
// in prepare_checkpoint (a second call before training goes on is a no-op on every rank),
// forgotten as soon as training goes on (they no longer describe the ranks).
class RankStates {
 public:
  bool collected() const { return collected_; }
  void collect(ProcessGroup& group, const core::StateDict& mine, const std::string& what) {
    states_ = gather_states_to_rank0(group, mine, what);
    collected_ = true;
  }
  void forget() {
    states_.clear();
    collected_ = false;
  }
  // Rank 0 after collect: "<prefix>ranks" and "<prefix>rank<r>.<name>"; nothing otherwise.
  void append_to(core::StateDict& out, const std::string& prefix) const {
    append_rank_states(out, prefix, states_);
  }

 private:
  std::vector<core::StateDict> states_;  // rank 0: every rank's, in rank order
  bool collected_ = false;               // every rank
};

// The checkpoint entry `name` ("dssync.step"), one int64, if the state has it (another
// algorithm's has not); another shape is an Error naming the entry.
std::optional<int64_t> saved_int64(const core::StateDict& state, const std::string& name);

// This rank's entries (names without "<prefix>rank<r>."), or nullopt with the reason in
// *why_not when the state has none or was written by another world size.
std::optional<core::StateDict> rank_state(const core::StateDict& state, const std::string& prefix,
                                          int rank, int world_size, std::string* why_not);

// Ranks that train models of their own between averages (DS-Sync, local SGD) save this per rank:
// the rank's weights ("local": the model's, or those set aside while it shows the average) and its
// optimizer state ("optim.<name>"). restore_own_replica puts this rank's back from a checkpoint's
// "<prefix>rank<r>.*" and returns true; when the checkpoint holds none for this world, rank 0
// notes why in `log` and every rank keeps the stored average and rank 0's optimizer state.
core::StateDict replica_state(const ModelVector& model, const optim::Optimizer& optimizer);
bool restore_own_replica(const core::StateDict& state, const std::string& prefix, const ProcessGroup& group,
                         ModelVector& model, optim::Optimizer& optimizer, std::ostream* log);

}  // namespace mt::dist
