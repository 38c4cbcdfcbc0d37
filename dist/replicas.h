// Keeping replicas identical at start-up: every data-parallel algorithm begins by checking that
// all ranks run the same model and config, then copies rank 0's weights to everyone. Shared by
// the S-SGD schedules and, later, CD-SGD and DS-Sync.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dist/process_group.h"
#include "layers/module.h"

namespace mt::dist {

// Waits for `work`; a failure (timeout, dead peer) is rethrown as an Error that also says what
// this rank was doing, so the first line of the log is enough to find the problem.
void finish(const std::shared_ptr<Work>& work, const ProcessGroup& group, const std::string& what);

// FNV-1a: a stable 64-bit hash (std::hash may differ between builds).
uint64_t stable_hash(const std::string& text);

// Every rank contributes a hash of its config text and of its parameter names and shapes
// (allgather); if any rank differs from rank 0, every rank throws the same Error naming the
// differing ranks. Must run before any collective whose sizes depend on the model.
void check_replicas_agree(ProcessGroup& group, const layers::Module& model,
                          const std::string& config_text);

// Copies the root's parameters and buffers into every rank's model (float32 tensors as one
// flattened broadcast, others one by one).
void broadcast_parameters(ProcessGroup& group, const layers::Module& model, int root = 0);
void broadcast_buffers(ProcessGroup& group, const layers::Module& model, int root = 0);

}  // namespace mt::dist
