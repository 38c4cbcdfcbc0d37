// Training checkpoints: everything needed to continue a run exactly where it stopped, in one
// archive (core/serialize.h):
//
//   model.*   the model's state dict (parameters and buffers)
//   optim.*   the optimizer's state (momentum buffers, step counts)
//   sync.*    the synchronizer's state (distributed algorithms that keep any)
//   meta      format, epoch and next batch in it, global iteration, the trainer's RNG state,
//             best test accuracy so far, and the run config as text (so `mintrain eval` and a
//             reader of the file know what produced it); with loss scaling (float16) also the
//             scale, its good-step count and the overflow count (loss_scale*; optional, so
//             checkpoints without them still load); the job's shape (world size, per-rank
//             batch, micro-batches, so a resume with another shape can convert the position)
//             and the training time so far (optional: older checkpoints lack them)
//
// A CheckpointDir names files by global iteration (iter-000001876.ckpt), keeps the newest K,
// and keeps best.ckpt (highest test accuracy) apart from the rotation.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/serialize.h"
#include "dist/synchronizer.h"
#include "layers/module.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace mt::apps {

// Where training is, and what is needed to continue it bit for bit.
struct TrainingState {
  int64_t epoch = 0;             // the epoch in progress, 0-based
  int64_t next_batch = 0;        // its first batch not yet trained (0 = the epoch starts fresh)
  int64_t global_iteration = 0;  // optimizer steps taken since the start of the run
  double best_accuracy = -1.0;   // best test accuracy so far, percent; -1 = not evaluated yet
  uint64_t rng_seed = 0;         // the trainer's generator (weight init, dropout)
  uint64_t rng_offset = 0;
  std::string config_text;       // the run config, text format
  // The loss scaler's state; absent when the run scales no loss (and in older checkpoints).
  std::optional<optim::LossScalerState> loss_scale;
  // The job that wrote it: ranks, batch per rank, micro-batches per step (0 = not recorded, in
  // older checkpoints). Their product is the global batch an iteration counts.
  int64_t world_size = 0;
  int64_t batch_size = 0;
  int64_t accumulation = 0;
  double elapsed_seconds = 0.0;  // training time so far (the metrics' "time" goes on from it)

  int64_t global_batch() const { return world_size * batch_size * accumulation; }
};

// Writes atomically (an interrupted save leaves any previous file intact).
void save_checkpoint(const std::string& path, const layers::Module& model,
                     const optim::Optimizer& optimizer, const dist::Synchronizer& sync,
                     const TrainingState& state);

// Restores into each non-null target and returns the state. A checkpoint that does not fit the
// model (another architecture or size) is an Error naming the file and the mismatch.
TrainingState load_checkpoint(const std::string& path, layers::Module* model,
                              optim::Optimizer* optimizer, dist::Synchronizer* sync);
// The same in two steps, for a caller that must look at the state before restoring.
TrainingState read_training_state(const core::Archive& archive, const std::string& path);
void restore_checkpoint(const core::Archive& archive, const std::string& path, layers::Module* model,
                        optim::Optimizer* optimizer, dist::Synchronizer* sync);

// Fine-tuning (`train --weights`): copies the checkpoint's model tensors whose name and shape
// match into `model`, as Caffe's --weights does, and returns a one-line account of what was
// copied and what was not. No matching tensor at all is an error.
std::string load_matching_weights(const std::string& path, layers::Module& model);

// --resume / --checkpoint PATH: a file is used as is; a folder means its newest checkpoint
// (looking in PATH, then PATH/checkpoints, so a run's output folder works too).
std::string resolve_checkpoint(const std::string& path);

class CheckpointDir {
 public:
  // keep_last: how many rotating checkpoints to keep; 0 = all.
  CheckpointDir(std::string dir, int keep_last);

  // Saves iter-<global_iteration>.ckpt, then deletes the oldest beyond keep_last; or, when
  // `best`, best.ckpt (outside the rotation). Returns the path written.
  std::string save(const layers::Module& model, const optim::Optimizer& optimizer,
                   const dist::Synchronizer& sync, const TrainingState& state, bool best = false);

  // The rotating checkpoints in `dir`, oldest first (best.ckpt excluded).
  static std::vector<std::string> list(const std::string& dir);
  static std::string file_name(int64_t global_iteration);

  // --resume auto: the newest checkpoint in `dir` that reads back intact ("" when there is
  // none), and the newer ones that did not (the disk filled up, a copy was cut short), each
  // with a warning to `warnings` when it is not null. Every checkpoint damaged is an Error:
  // starting over silently would throw the run's progress away.
  struct Intact {
    std::string file;
    std::vector<std::string> damaged;
  };
  static Intact newest_intact(const std::string& dir, std::ostream* warnings);

  // Resuming from an older checkpoint than the folder's newest abandons the newer ones: the
  // files numbered above `global_iteration` are moved into "<dir>/superseded-<date>-<time>/"
  // (kept, but out of the rotation and out of --resume auto's reach). Returns the names of the
  // files moved and where they went (empty when nothing was newer).
  struct SetAside {
    std::vector<std::string> names;
    std::string folder;
  };
  static SetAside set_aside_newer_than(const std::string& dir, int64_t global_iteration);
  // Moves damaged checkpoints aside as "<file>.damaged" (out of the rotation: they no longer
  // count toward keep_last). Returns a note naming them ("" when there were none).
  static std::string set_aside_damaged(const std::vector<std::string>& files);
  // The iteration in a checkpoint's file name ("iter-000001876.ckpt"), or -1 for another name.
  static int64_t iteration_in_name(const std::string& path);

 private:
  std::string dir_;
  int keep_last_;
};

}  // namespace mt::apps
