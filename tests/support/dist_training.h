// What the distributed-algorithm tests (S-SGD, CD-SGD, DS-Sync) build on: a tiny MLP from a
// seed, and a short Trainer run of configs/mlp_synthetic.prototxt on a given process group.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm/process_group.h"
#include "dist/ssgd/ssgd_synchronizer.h"
#include "dist/synchronizer.h"
#include "dist/timeline.h"
#include "layers/module.h"
#include "optim/step_guard.h"
#include "support/multiprocess.h"

namespace mt::testing {

// MLP over 1 x image x image inputs with hidden layers {16, 12}, weights drawn from `seed`.
std::shared_ptr<layers::Module> tiny_mlp(uint64_t seed, int64_t image, int64_t classes);

// Trains configs/mlp_synthetic.prototxt on `group` (one thread, per-rank batch 8, output in
// output_dir) with `overrides` ("field.path=value") applied; rank 0 logs to `log`, the other
// ranks are quiet. Returns the final test accuracy in percent.
double train_synthetic_mlp(std::shared_ptr<dist::ProcessGroup> group, int rank,
                           const std::string& output_dir, const std::vector<std::string>& overrides,
                           std::ostream& log);

// What the "N ranks = one rank with N x the batch" tests share: global batch `step` of `rows`
// random 1 x image x image examples over `classes` labels (the same stream in every process);
// the reference optimizer they all step with (SGD, lr 0.1, momentum 0.9, weight decay 1e-3);
// and a model's weights as plain vectors, to compare exactly.
std::pair<core::Tensor, core::Tensor> synthetic_batch(int step, int64_t rows, int64_t image, int64_t classes);
std::unique_ptr<optim::StepGuard> reference_sgd(const layers::Module& model);
// A plain optimizer inside the trainer's StepGuard (no clipping, no loss scaling): what the
// synchronizers get from the trainer.
std::unique_ptr<optim::StepGuard> guarded(std::unique_ptr<optim::Optimizer> inner);
// One step after backward, as the trainer takes it: the synchronizer ends the iteration, and the
// optimizer steps where the algorithm leaves the step to the trainer (an "optimizer" span on
// `timeline`, when given).
void step(dist::Synchronizer& sync, optim::StepGuard& optimizer, dist::Timeline* timeline = nullptr);
std::vector<std::vector<float>> weights_of(const layers::Module& model);

// Fault tests: trains tiny_mlp(7, image, classes) with the synchronizer `make` builds, on this
// rank's rows_per_rank of synthetic_batch per step, 5 ms apart so that a fault lands mid-run,
// until something throws; returns the error text ("" if training ended, which the caller reports).
std::string train_until_error(const std::function<std::unique_ptr<dist::Synchronizer>()>& make, int workers,
                              int rank, int64_t rows_per_rank, int64_t image, int64_t classes);
// The numeric field `field` of every "train" record of a metrics file (one JSON object a line)
// that also has `also`: what an algorithm's metrics_fields wrote, in record order.
std::vector<double> train_record_values(const std::string& metrics_file, const std::string& field,
                                        const std::string& also);
// Options for the fault tests: the group's timeout (how soon a dead peer is named) and a 40 s
// harness limit.
MultiprocessOptions fault_options(int group_timeout_s);
// Kills this process with SIGKILL after `delay`, from a thread: a rank dying mid-run.
void die_after(std::chrono::milliseconds delay);

// The entry `name` of a communication hook's state (undefined when it has none).
core::Tensor state_entry(const dist::CommHook& hook, const std::string& name);

// Whether S-SGD sends while backward runs: registers on every parameter a grad-ready hook (after
// the synchronizer's) that appends how many of sync's buckets have gone to the process group.
// After a backward pass, entry k is the count when the k-th gradient was ready (clear it before
// each backward).
std::shared_ptr<std::vector<size_t>> record_launched_buckets(const dist::SsgdSynchronizer& sync,
                                                             const std::vector<core::Tensor>& params);

}  // namespace mt::testing
