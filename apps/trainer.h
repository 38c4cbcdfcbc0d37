// The trainer: turns a RunConfig into a model, optimizer, schedule, data loaders and a
// synchronizer, and runs the training loop with progress lines, metrics, evaluation and
// checkpoints. `mintrain train` and `mintrain eval` are thin wrappers around it; tests drive it
// directly.
//
// What is trained on what comes from a Task (apps/task.h): image classification, or BERT's
// masked-language modelling. One iteration:
//                 lr from the schedule at the fractional epoch
//                 sync.begin_iteration -> forward + loss (the task) -> backward
//                   (x dist.grad_accumulation_steps micro-batches, loss scaled by 1/k)
//                 sync.end_iteration(optimizer), and optimizer.step() where the algorithm
//                 leaves the step to the trainer -> optimizer.zero_grad()
// The optimizer is wrapped in a StepGuard (optim/step_guard.h): NaN/Inf gradients skip the step
// (then on_nonfinite decides: stop, or go on), and optimizer.max_grad_norm clips.
// Mixed precision: config.precision sets the process-wide compute precision of matmul and
// convolution (core/precision.h); float16 runs scale the loss (backward is seeded with the
// scale) and the guard unscales, skips overflowing steps and adapts the scale
// (optim/loss_scaler.h), which checkpoints keep. config.cuda sets TF32 and cuDNN's workspace.
// Distributed (WORLD_SIZE > 1 from the launcher, or dist.force_distributed): the trainer joins
// the rendezvous, asks the registry for the synchronizer config.dist names (dist/registry.h),
// and each rank reads a disjoint shard of the data (data.batch_size is per rank). The job
// (dist/job.h) averages metrics and takes the stop vote. Only rank 0 prints, writes metrics and
// checkpoints. Evaluation: every rank evaluates its shard of
// the test set and the sums are combined (DistributedSampler pads an uneven split by wrapping
// around, so up to world_size-1 test images may count twice).
// Every run is reproducible from (config, thread count): weights come from a Generator seeded by
// config.seed, data order and augmentation from the loader's seed, and a checkpoint stores the
// exact data position, so a resumed run continues bit for bit like an uninterrupted one.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <string>

#include "apps/checkpoint.h"
#include "apps/config.h"
#include "apps/run_folder.h"
#include "apps/task.h"
#include "core/device.h"
#include "core/random.h"
#include "dist/job.h"
#include "dist/comm/process_group.h"
#include "dist/comm/store.h"
#include "dist/synchronizer.h"
#include "dist/timeline.h"
#include "layers/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/step_guard.h"

namespace mt::apps {

struct TrainerOptions {
  std::ostream* log = nullptr;  // progress lines; nullptr = std::cout
  bool quiet = false;           // no progress lines at all (tests)
  // When set (e.g. from a SIGINT handler), training saves a checkpoint after the current
  // iteration and returns with interrupted = true.
  const std::atomic<bool>* stop_flag = nullptr;
  // Stop the same way once this many iterations have run in total; -1 = never. Lets tests (and
  // time-boxed jobs) interrupt a run at an exact point.
  int64_t stop_at_iteration = -1;
  // Evaluation only: skip loading the training split.
  bool eval_only = false;
  // A fresh run into a folder that holds another run moves that run aside instead of
  // refusing to start (apps/run_folder.h; `train --overwrite`).
  bool overwrite = false;
  // Train on this process group instead of joining the launcher's rendezvous (tests run ranks
  // as threads or forked processes). Null = from the environment (dist::world_from_env).
  std::shared_ptr<dist::ProcessGroup> group;
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // percent
  int64_t examples = 0;  // predictions the loss and accuracy average over (images, masked tokens)
  int64_t units = 0;     // what throughput counts (images, tokens)
  double seconds = 0.0;
};

struct TrainResult {
  bool interrupted = false;
  int64_t iterations = 0;      // global iteration reached
  EvalResult last_eval;        // of the last evaluation run (examples == 0 if none)
  double best_accuracy = -1.0;
  double seconds = 0.0;
  std::string last_checkpoint;  // empty when checkpoints are off
};

class Trainer {
 public:
  explicit Trainer(RunConfig config, TrainerOptions options = {});
  ~Trainer();  // (not copyable: it owns the model, the optimizer and the process group)

  // Continues from a checkpoint (a file, or a folder: its newest checkpoint).
  void resume(const std::string& path);
  // `--resume auto`: continues from the newest intact checkpoint of this run's checkpoint
  // folder; the damaged newer ones are moved aside when train() claims the folder. With none,
  // train() starts over, moving aside a run that died before its first checkpoint (as
  // --overwrite would), so a restart after a crash in the first epoch runs.
  void resume_auto();
  // Loads the model weights, and the checkpoint's state into state() (for evaluation).
  void load_weights(const std::string& path);
  // Fine-tuning (`train --weights`): a fresh run that starts from a checkpoint's weights where
  // names and shapes match (the optimizer, schedule and data position start over).
  void init_from_weights(const std::string& path);

  // Runs the remaining epochs.
  TrainResult train();
  EvalResult evaluate();

  layers::Module& model() { return *model_; }
  // The configured optimizer inside its StepGuard (what every step calls).
  optim::StepGuard& optimizer() { return *optimizer_; }
  // What is trained: its loaders, and the forward pass and loss of a batch.
  Task& task() { return *task_; }
  // The loss scaler (float16 runs; loss_scale.mode), or null when the loss is not scaled.
  const optim::DynamicLossScaler* loss_scaler() const { return optimizer_->loss_scaler(); }
  const TrainingState& state() const { return state_; }
  const std::string& output_dir() const { return output_dir_; }
  int64_t iterations_per_epoch() const { return iters_per_epoch_; }

  // This process's rank in the data-parallel job (0 when training alone); only rank 0 reports.
  int rank() const { return job_->rank(); }

 private:
  std::ostream& log();
  bool chatty() const { return !options_.quiet && job_->rank() == 0; }  // rank 0 prints, unless quiet
  TrainingState snapshot() const;
  // A checkpoint of another job shape (ranks, batch per rank, micro-batches): converts its
  // position to this job's iterations at the same sample count, or refuses where the
  // synchronizer's state is per rank.
  void convert_job_shape(TrainingState& s, const std::string& file);
  // Rank 0 claims the output folder (apps/run_folder.h; its lock is held while the RunFolder
  // lives, null on the other ranks); every rank learns whether it could.
  std::unique_ptr<RunFolder> claim_output_folder();
  EvalResult evaluate_and_report(int64_t epoch, bool* is_best);
  std::string save_checkpoint(bool best = false);
  // One record of the metrics log: `fields`, then the training time and the wall-clock time.
  void write_metrics(const std::string& fields);
  std::string resolve_in_output(const std::string& path) const;
  void connect();  // the process group and synchronizer (before the loaders: they shard by rank)
  // Whether the step just taken counts as bad (NaN/Inf gradients that loss scaling does not
  // explain, or a NaN/Inf loss on any rank); then handle_nonfinite_step decides.
  bool bad_step_after_guard(double step_loss);
  // After a bad step the guard skipped: stop or go on per on_nonfinite.
  void handle_nonfinite_step(double loss);

  RunConfig config_;
  TrainerOptions options_;
  core::Device device_;
  std::string output_dir_;
  std::unique_ptr<core::Generator> gen_;  // stable address: models may keep a reference
  std::unique_ptr<Task> task_;  // data, model construction, loss (apps/task.h)
  std::shared_ptr<layers::Module> model_;
  std::unique_ptr<optim::StepGuard> optimizer_;  // the configured optimizer, NaN/Inf check, clipping
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::shared_ptr<dist::Store> store_;         // distributed runs: the rendezvous store
  std::shared_ptr<dist::ProcessGroup> group_;  // and the workers' group (null: one process)
  // With parameter servers: the world of workers and servers (group_ is its first ranks).
  std::shared_ptr<dist::ProcessGroup> world_with_servers_;
  std::shared_ptr<dist::Timeline> timeline_;   // dist.timeline_file (null: off)
  std::unique_ptr<dist::Job> job_;  // rank, world size, metric averages, the stop vote
  std::unique_ptr<dist::Synchronizer> sync_;  // the algorithm config.dist names
  int accumulation_ = 1;                       // micro-batches per optimizer step
  std::unique_ptr<CheckpointDir> checkpoints_;
  std::ofstream metrics_;
  int64_t iters_per_epoch_ = 0;
  int64_t epochs_ = 0;  // epochs this run spans (from max_steps when it is set)
  TrainingState state_;
  bool resumed_ = false;
  ResumePoint resumed_at_;    // what resume() read, for what train() sets aside
  std::string resumed_note_;  // "resumed from ...", said once the folder is claimed
  bool start_over_ = false;   // resume_auto() found no checkpoint
  std::chrono::steady_clock::time_point train_start_;  // of the running train()
  int64_t nonfinite_in_a_row_ = 0;
  int64_t bad_steps_ = 0;  // bad steps skipped in this process (loss-scale overflows excluded)
};

}  // namespace mt::apps
