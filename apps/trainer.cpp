#include "apps/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/precision.h"
#include "core/runtime.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/math_mode.h"
#endif
#include "core/strings.h"
#include "dist/registry.h"
#include "dist/comm/rendezvous.h"
#include "optim/registry.h"

namespace mt::apps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string hms(double seconds) {
  const long long s = seconds > 0 && std::isfinite(seconds) ? static_cast<long long>(seconds) : 0;
  return core::formatted("%02lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

// Learning rates span orders of magnitude; fixed point would print 0.0000 for small ones.
std::string lr_text(double lr) { return core::formatted(lr >= 1e-3 || lr == 0 ? "%.4f" : "%.2e", lr); }

// A JSON number (JSON has no NaN/Inf: write null).
std::string num(double v) { return std::isfinite(v) ? core::formatted("%.6g", v) : "null"; }

// loss_scale.mode as the run uses it: the config's when it sets one, else dynamic scaling for
// float16 (whose gradients underflow without it) and none for the other precisions.
std::string loss_scale_mode(const RunConfig& c) {
  if (c.has_loss_scale() && c.loss_scale().has_mode()) return c.loss_scale().mode();
  return c.precision() == "fp16" ? "dynamic" : "none";
}

// A check whose failure is the config's or the job's to fix (a rerun cannot): exit status 3.
template <typename... Parts>
void check_config(bool ok, const Parts&... parts) {
  if (!ok) throw core::ConfigError(core::detail::concat(parts...));
}

std::unique_ptr<optim::DynamicLossScaler> make_loss_scaler(const RunConfig& c) {
  const std::string mode = loss_scale_mode(c);
  if (mode == "none") return nullptr;
  const auto& lc = c.loss_scale();
  optim::LossScalerOptions o;
  o.dynamic = mode == "dynamic";
  o.init_scale = lc.init_scale();
  o.growth_factor = lc.growth_factor();
  o.backoff_factor = lc.backoff_factor();
  o.growth_interval = lc.growth_interval();
  return std::make_unique<optim::DynamicLossScaler>(o);
}

// Every rank runs rank 0's config (config_identity_text). The synchronizer's start-up check
// compares hashes, so it can only say that one differs; through the rendezvous store rank 0
// names what differs (the output folder too: --resume auto reads the checkpoints there), and
// every rank stops with that verdict as a ConfigError, which no launcher restarts.
void check_ranks_run_one_config(dist::Store& store, int rank, int ranks, const RunConfig& config) {
  const auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  const auto text = [](const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); };
  const std::string mine = config_identity_text(config);
  if (rank > 0) store.set("mintrain/config/" + std::to_string(rank), bytes(mine));
  if (rank == 0) {
    std::string verdict;
    for (int r = 1, named = 0; r < ranks && named < 3; ++r) {
      const std::string diff = config_differences(mine, text(store.get("mintrain/config/" + std::to_string(r))), true);
      if (diff.empty()) continue;
      verdict += (named++ ? "; rank " : "rank ") + std::to_string(r) + ": " + diff;
    }
    store.set("mintrain/config/verdict", bytes(verdict));
  }
  const std::string verdict = text(store.get("mintrain/config/verdict"));
  check_config(verdict.empty(), "the ranks do not run one config (rank 0's value -> theirs): ", verdict,
               "; start every rank with the same config file, --set overrides and --output");
}

}  // namespace

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : config_(std::move(config)), options_(options) {
  normalize_names(config_);
  validate_config(config_);
  // More threads than cores only wait for each other (train() says so in its first line).
  core::set_num_threads(std::min(config_.threads(), core::usable_cores()));
  // Process-wide numeric settings: the compute precision of matmul/conv (core/precision.h),
  // and on the GPU TF32 and the cuDNN workspace limit (core/kernels/cuda/math_mode.h).
  core::set_compute_precision(core::parse_compute_precision(config_.precision()));
#ifdef MT_CUDA_KERNELS
  core::cuda::set_allow_tf32(config_.cuda().allow_tf32());
  core::cuda::set_conv_workspace_limit(static_cast<size_t>(config_.cuda().cudnn_workspace_mb()) << 20);
#endif

  // "cuda" is this rank's own GPU (its LOCAL_RANK among the node's visible devices).
  device_ = core::resolve_device(config_.device(), core::local_rank_from_env(),
                                 config_.device() == "cuda" ? core::cuda_device_count() : 0);
  check_config(device_.is_cpu() || core::cuda_device_count() > device_.index, "device \"", config_.device(),
               "\" (", device_.str(), ") is not available: ",
               core::cuda_device_count() == 0 ? core::cuda_unavailable_reason()
                                              : std::to_string(core::cuda_device_count()) + " CUDA devices are visible",
               "; set device: \"cpu\", or run where that GPU is");
  // Kernels, the loader's copies and NCCL's communicator go to this thread's current GPU.
  core::select_device(device_);

  output_dir_ = config_.output_dir().empty() ? "runs/" + config_.name() : config_.output_dir();
  gen_ = std::make_unique<core::Generator>(config_.seed());
  connect();

  // Data and model, from the task.
  TaskContext tctx;
  tctx.rank = job_->rank();
  tctx.world_size = job_->world_size();
  tctx.device = device_;
  tctx.output_dir = output_dir_;
  tctx.eval_only = options_.eval_only;
  // The data is what the config names: missing or unusable, a rerun finds it the same.
  try {
    task_ = make_task(config_, tctx);
  } catch (const core::Error& e) {
    throw core::ConfigError(e.what());
  }
  const auto& dc = config_.data();
  if (data::BatchLoader* train = task_->train_loader()) {
    iters_per_epoch_ = train->batches_per_epoch();
    if (dc.limit_train_batches() > 0) iters_per_epoch_ = std::min(iters_per_epoch_, dc.limit_train_batches());
    check_config(iters_per_epoch_ > 0, "the training set (", task_->describe_train(),
                 ") gives no batch of data.batch_size=", dc.batch_size(),
                 "; lower the batch size or set data.drop_last: false");
  }
  accumulation_ = std::max(1, config_.dist().grad_accumulation_steps());
  if (task_->train_loader() && accumulation_ > 1) {
    iters_per_epoch_ /= accumulation_;  // optimizer steps, each of k loader batches
    check_config(iters_per_epoch_ > 0, "an epoch has fewer batches than dist.grad_accumulation_steps=",
                 accumulation_, "; lower it or the batch size");
  }
  model_ = task_->build_model(*gen_);
  model_->to(device_);

  // Optimizer and schedule.
  const auto& oc = config_.optimizer();
  optim::OptimizerOptions oopt;
  oopt.lr = oc.lr();
  // Momentum correction: the synchronizer applies the momentum and L2 decay before its
  // exchange; the optimizer takes the plain step with the averaged result.
  const bool plain_step = sync_->takes_over_momentum();
  oopt.momentum = plain_step ? 0.0 : oc.momentum();
  oopt.dampening = plain_step ? 0.0 : oc.dampening();
  oopt.nesterov = !plain_step && oc.nesterov();
  oopt.weight_decay = plain_step && !oc.decoupled_weight_decay() ? 0.0 : oc.weight_decay();
  oopt.decoupled_weight_decay = oc.decoupled_weight_decay();
  oopt.beta1 = oc.beta1();
  oopt.beta2 = oc.beta2();
  oopt.eps = oc.eps();
  oopt.no_decay_1d = oc.no_decay_1d();
  auto loss_scaler = make_loss_scaler(config_);
  if (loss_scaler && group_) {
    // The guard unscales after the synchronizer has exchanged the (scaled) gradients; that is
    // only right where the exchange is a plain average: compressed exchanges keep residuals
    // and momenta of scaled values across steps, and CD-SGD and DS-Sync step on local
    // gradients outside the guard (or per rank, so the ranks' scales would drift apart).
    check_config(sync_->steps_on_gradient_average(), "loss scaling (precision \"", config_.precision(),
                 "\", loss_scale.mode \"", loss_scale_mode(config_), "\") works where the optimizer steps on the "
                 "plain average of the step's gradients (dist.algorithm \"ssgd\" without compression), not with ",
                 sync_->name(), "; use precision \"bf16\", which needs no loss scaling, or plain S-SGD");
  }
  optimizer_ = std::make_unique<optim::StepGuard>(
      optim::build_optimizer(oc.name(), model_->parameters(), oopt), oc.max_grad_norm(),
      std::move(loss_scaler));

  const auto& sc = config_.lr_schedule();
  optim::LrScheduleOptions sopt;
  sopt.type = sc.type();
  sopt.base_lr = oc.lr();
  sopt.gamma = sc.gamma();
  sopt.step_epochs = sc.step_epochs();
  sopt.milestones.assign(sc.milestones().begin(), sc.milestones().end());
  // max_steps replaces epochs: the schedule ends at the last step (fractional epochs).
  sopt.total_epochs = config_.max_steps() > 0 && iters_per_epoch_ > 0
                          ? static_cast<double>(config_.max_steps()) / iters_per_epoch_
                          : config_.epochs();
  sopt.min_lr = sc.min_lr();
  sopt.warmup_epochs = sc.warmup_epochs();
  sopt.warmup_start_factor = sc.warmup_start_factor();
  const std::string warmup_warning = check_warmup_fits(config_, sopt, iters_per_epoch_);
  if (!warmup_warning.empty() && chatty()) log() << warmup_warning << std::endl;
  try {
    schedule_ = std::make_unique<optim::LrSchedule>(sopt);
  } catch (const core::Error& e) {
    throw core::ConfigError(e.what());  // every option comes from lr_schedule and optimizer.lr
  }

  sync_->setup(*model_, *optimizer_);
  state_.config_text = config_to_text(config_);
  state_.rng_seed = gen_->seed();
  state_.rng_offset = gen_->offset();
}

Trainer::~Trainer() = default;

void Trainer::connect() {
  const auto& dc = config_.dist();
  group_ = options_.group;
  if (!group_) {
    const dist::WorldInfo world = dist::world_from_env();
    if (world.world_size > 1 || dc.force_distributed()) {
      check_config(world.servers == 0 || dist::uses_parameter_servers(dc), "rank ", world.rank, ": the job has ",
                   world.servers, " parameter servers (MINTRAIN_NUM_SERVERS) but dist.algorithm \"", dc.algorithm(),
                   "\" uses none; ", dist::parameter_servers_hint());
      check_config(!world.is_server(), "rank ", world.rank, " is a parameter server's (MINTRAIN_NUM_SERVERS=",
                   world.servers, "): run it with `mintrain train`, which serves instead of training");
      dist::ProcessGroupOptions po;
      // The servers are CPU processes on Gloo; device gradients are staged through host memory.
      po.backend = !dc.backend().empty() ? dc.backend() : device_.is_cuda() && world.servers == 0 ? "nccl" : "gloo";
      // Gloo moves host memory: GPU gradients in its buckets would fail at the first allreduce.
      check_config(!(device_.is_cuda() && po.backend == "gloo" && world.servers == 0), "rank ", world.rank,
                   ": dist.backend \"gloo\" exchanges CPU tensors, but device is ", device_.str(),
                   "; set dist.backend \"nccl\", or leave it empty (\"\": nccl on a GPU, gloo on the CPU)");
      po.transport = dc.transport();
      po.interface = dc.interface();
      po.timeout = std::chrono::seconds(dc.timeout_seconds());
      dist::Rendezvous r = dist::rendezvous(world, po, std::chrono::seconds(30), options_.stop_flag);
      store_ = r.store;
      group_ = r.group;
      check_ranks_run_one_config(*store_, world.rank, world.workers(), config_);
      if (world.servers > 0) {
        // Metric averages, stop votes and start-up broadcasts stay among the workers.
        world_with_servers_ = r.group;
        std::vector<int> workers(static_cast<size_t>(world.workers()));
        std::iota(workers.begin(), workers.end(), 0);
        group_ = r.group->subgroup(workers);
      }
    }
  }
  // The timeline records forward, backward and the step in one process too (its
  // communication spans then stay empty).
  if (!dc.timeline_file().empty()) {
    timeline_ = std::make_shared<dist::Timeline>(resolve_in_output(dc.timeline_file()), group_ ? group_->rank() : 0);
  }
  job_ = std::make_unique<dist::Job>(group_);
  // The algorithm reads its own message of config.dist (dist/registry.h). The ranks check that
  // they run one config, up to the GPU index each may bind (config_identity_text).
  sync_ = dist::make_synchronizer(group_, config_, config_identity_text(config_), timeline_,
                                  options_.quiet ? nullptr : &log(), world_with_servers_);
}

std::ostream& Trainer::log() { return options_.log ? *options_.log : std::cout; }

std::string Trainer::resolve_in_output(const std::string& path) const {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(output_dir_) / path).string();
}

void Trainer::resume(const std::string& path) {
  const std::string file = resolve_checkpoint(path);
  const core::Archive archive = core::load_archive(file);
  TrainingState s = read_training_state(archive, file);
  resumed_at_.checkpoint = file;
  resumed_at_.iteration = s.global_iteration;
  convert_job_shape(s, file);
  restore_checkpoint(archive, file, model_.get(), optimizer_.get(), sync_.get());
  MT_CHECK(s.next_batch <= iters_per_epoch_ || iters_per_epoch_ == 0, "checkpoint \"", file,
           "\" stopped at batch ", s.next_batch, " of an epoch, but this config has only ",
           iters_per_epoch_, " batches per epoch; resume with the config it was trained with");
  if (const std::string diff = config_differences(s.config_text, state_.config_text); chatty() && !diff.empty()) {
    log() << "note: continuing with the given config, which differs from the one stored in " << file << ": "
          << diff << "\n";
  }
  s.config_text = state_.config_text;
  state_ = s;
  gen_->set_state(s.rng_seed, s.rng_offset);
  resumed_ = true;
  resumed_at_.continues_at = s.global_iteration;
  if (optim::DynamicLossScaler* scaler = optimizer_->loss_scaler()) {
    if (s.loss_scale) {
      scaler->load_state_dict(*s.loss_scale);
    } else if (chatty()) {
      log() << "note: " << file << " holds no loss scale; starting from loss_scale.init_scale "
            << scaler->scale() << "\n";
    }
  }
  // Said once train() holds the folder: another run may own it still.
  resumed_note_ = "resumed from " + file + " at epoch " + std::to_string(s.epoch + 1) + " batch " +
                  std::to_string(s.next_batch) + " (iteration " + std::to_string(s.global_iteration) + ")";
}

void Trainer::resume_auto() {
  const std::string dir = resolve_in_output(config_.checkpoint().dir());
  if (dir.empty()) {
    if (chatty()) log() << "note: checkpoints are off (checkpoint.dir is empty); starting from scratch\n";
  } else {
    const CheckpointDir::Intact found = CheckpointDir::newest_intact(dir, chatty() ? &std::cerr : nullptr);
    resumed_at_.damaged = found.damaged;
    if (!found.file.empty()) return resume(found.file);
    if (chatty()) log() << "no checkpoint in " << dir << " yet; starting from scratch\n";
  }
  start_over_ = true;
}

void Trainer::convert_job_shape(TrainingState& s, const std::string& file) {
  const int64_t world = job_->world_size(), batch = config_.data().batch_size();
  const int64_t ours = world * batch * accumulation_;
  if (s.global_batch() == 0 || s.global_batch() == ours) return;  // older checkpoint, or the same job
  const std::string theirs_text = std::to_string(s.global_batch()) + " (" + std::to_string(s.world_size) +
                                  " ranks x " + std::to_string(s.batch_size) + " x " +
                                  std::to_string(s.accumulation) + " micro-batches)";
  resumed_at_.batch_then = s.global_batch();
  resumed_at_.batch_now = ours;
  const std::string ours_text = std::to_string(ours) + " (" + std::to_string(world) + " ranks x " +
                                std::to_string(batch) + " x " + std::to_string(accumulation_) + " micro-batches)";
  // Only plain S-SGD keeps no state of its own per rank: the others' residuals, velocities
  // and local models belong to the ranks that wrote them.
  const bool per_rank_state = world > 1 && sync_->keeps_state_per_rank();
  check_config(!(per_rank_state && s.world_size != world), "checkpoint \"", file, "\" was written by ",
               s.world_size, " ranks, and this job has ", world, "; ", sync_->name(),
               " keeps state per rank, so it resumes on ", s.world_size,
               " ranks only (`mintrain launch --nproc-per-node ", s.world_size, "`)");
  // Same samples seen, same point of the schedule: an iteration of theirs is g_theirs / g_ours
  // of ours (the data order from here on differs from an uninterrupted run's).
  const int64_t old_iteration = s.global_iteration, old_batch = s.next_batch;
  s.global_iteration = s.global_iteration * s.global_batch() / ours;
  s.next_batch = s.next_batch * s.global_batch() / ours;
  if (chatty()) {
    log() << "note: " << file << " was written by a job of global batch " << theirs_text
          << "; this job's is " << ours_text << ". Continuing at the same number of samples: iteration "
          << old_iteration << " -> " << s.global_iteration << ", epoch " << s.epoch + 1 << " batch " << old_batch
          << " -> " << s.next_batch << "\n";
  }
}

void Trainer::load_weights(const std::string& path) {
  state_ = load_checkpoint(resolve_checkpoint(path), model_.get(), nullptr, nullptr);
}

void Trainer::init_from_weights(const std::string& path) {
  const std::string account = load_matching_weights(resolve_checkpoint(path), *model_);
  if (chatty()) log() << "--weights: " << account << "\n";
}

TrainingState Trainer::snapshot() const {
  TrainingState s = state_;
  s.rng_seed = gen_->seed();
  s.rng_offset = gen_->offset();
  s.loss_scale.reset();
  if (const optim::DynamicLossScaler* scaler = optimizer_->loss_scaler()) s.loss_scale = scaler->state_dict();
  s.world_size = job_->world_size();
  s.batch_size = config_.data().batch_size();
  s.accumulation = accumulation_;
  s.elapsed_seconds = state_.elapsed_seconds + seconds_since(train_start_);  // checkpoints: within train()
  return s;
}

std::string Trainer::save_checkpoint(bool best) {
  if (config_.checkpoint().dir().empty()) return "";
  sync_->prepare_checkpoint(*model_);  // collective (every rank's state to rank 0): all call it
  if (job_->rank() != 0) return "";
  if (!checkpoints_) {
    checkpoints_ = std::make_unique<CheckpointDir>(resolve_in_output(config_.checkpoint().dir()),
                                                   config_.checkpoint().keep_last());
  }
  return checkpoints_->save(*model_, *optimizer_, *sync_, snapshot(), best);
}

void Trainer::write_metrics(const std::string& fields) {
  if (!metrics_.is_open()) return;
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  metrics_ << "{" << fields << ",\"time\":" << num(state_.elapsed_seconds + seconds_since(train_start_))
           << ",\"wall_time\":" << core::formatted("%.3f", wall) << "}\n";
  metrics_.flush();  // a crashed or interrupted run keeps every line written so far
}

EvalResult Trainer::evaluate() {
  const auto start = Clock::now();
  core::NoGradGuard no_grad;
  sync_->prepare_eval(*model_);
  const bool was_training = model_->is_training();
  model_->eval();

  const int64_t limit = config_.data().limit_eval_batches();
  double loss_sum = 0.0;
  int64_t correct = 0, count = 0, units = 0;
  data::BatchLoader& loader = task_->test_loader();
  loader.start_epoch(0);
  data::Batch batch;
  for (int64_t b = 0; (limit == 0 || b < limit) && loader.next(batch); ++b) {
    const BatchResult r = task_->run(*model_, batch);
    loss_sum += static_cast<double>(r.loss.item()) * r.predictions;
    correct += r.correct;
    count += r.predictions;
    units += r.units;
  }
  model_->train(was_training);
  MT_CHECK(count > 0, "the test set (", task_->describe_test(), ") gave no examples");

  // Ratio of averages = ratio of sums: every rank contributes in proportion to its examples.
  EvalResult r;
  const double total = job_->average(static_cast<double>(count));
  r.loss = job_->average(loss_sum) / total;
  r.accuracy = 100.0 * job_->average(static_cast<double>(correct)) / total;
  r.examples = static_cast<int64_t>(std::llround(total * job_->world_size()));
  r.units = static_cast<int64_t>(std::llround(job_->average(static_cast<double>(units)) * job_->world_size()));
  r.seconds = seconds_since(start);
  return r;
}

bool Trainer::bad_step_after_guard(double step_loss) {
  if (!optimizer_->last_step_skipped()) return false;
  if (!optimizer_->last_step_overflowed()) return true;
  // A loss-scale overflow is routine (the scale was lowered) unless the loss itself was NaN or
  // Inf, on any rank. Every rank saw the same averaged gradients and so the same overflow, so
  // they all join this collective.
  return job_->any(!std::isfinite(step_loss));
}

void Trainer::handle_nonfinite_step(double loss) {
  ++nonfinite_in_a_row_;
  ++bad_steps_;
  const bool skip = config_.on_nonfinite() == "skip";
  constexpr int64_t kMaxInARow = 10;
  // The step that failed is the next one counted (global_iteration counts completed steps).
  const std::string what = core::formatted("iteration %lld: the gradient norm is %g (loss %g)",
                                  static_cast<long long>(state_.global_iteration + 1),
                                  optimizer_->last_grad_norm(), loss);
  if (skip && nonfinite_in_a_row_ < kMaxInARow) {
    if (chatty()) {
      log() << "warning: " << what << "; step skipped (" << bad_steps_ << " skipped so far)" << std::endl;
    }
    return;
  }
  MT_FAIL(what, skip ? "; " + std::to_string(kMaxInARow) + " steps in a row were NaN/Inf" : std::string(),
          ". Training stopped without taking the step; the last checkpoint (if any) is intact. "
          "Lower optimizer.lr, set optimizer.max_grad_norm, ",
          skip ? "or check the data" : "check the data, or set on_nonfinite: \"skip\" to skip such steps");
}

std::unique_ptr<RunFolder> Trainer::claim_output_folder() {
  std::unique_ptr<RunFolder> folder;
  // 0: claimed; 1: failed (the folder is in use, or not writable); 2: refused for good.
  int code = 0;
  std::string error;
  if (job_->rank() == 0) {
    try {
      RunFolderPaths paths;
      paths.output_dir = output_dir_;
      paths.checkpoint_dir = resolve_in_output(config_.checkpoint().dir());
      paths.metrics_file = resolve_in_output(config_.logging().metrics_file());
      const RunFolderMode mode = resumed_             ? RunFolderMode::Continue
                                 : options_.overwrite ? RunFolderMode::Overwrite
                                 : start_over_        ? RunFolderMode::StartOver
                                                      : RunFolderMode::Fresh;
      folder = std::make_unique<RunFolder>(paths, mode, options_.quiet ? nullptr : &log());
      if (!options_.quiet && !resumed_note_.empty()) log() << resumed_note_ << "\n";
      if (resumed_) folder->continue_from(resumed_at_);
      // The resolved config (what actually ran) and the metrics log; a resumed run appends to
      // the log instead of starting it over.
      std::ofstream(fs::path(output_dir_) / "config.prototxt") << state_.config_text;
      if (!paths.metrics_file.empty()) {
        metrics_.open(paths.metrics_file, resumed_ ? std::ios::app : std::ios::trunc);
        MT_CHECK(metrics_.is_open(), "cannot write metrics file \"", paths.metrics_file,
                 "\"; set logging.metrics_file to a writable path or \"\"");
      }
    } catch (const core::ConfigError& e) {
      code = 2;
      error = e.what();
    } catch (const core::Error& e) {
      code = 1;
      error = e.what();
    }
  }
  // Only rank 0 has a say; the others hear its verdict instead of waiting in the first
  // collective until the timeout.
  const int agreed = static_cast<int>(std::lround(job_->average(code) * job_->world_size()));
  if (agreed == 0) return folder;
  if (error.empty()) error = "rank 0 could not claim the output folder \"" + output_dir_ + "\" (see its error)";
  if (agreed == 2) throw core::ConfigError(error);
  throw core::Error(error);
}

EvalResult Trainer::evaluate_and_report(int64_t epoch, bool* is_best) {
  const EvalResult r = evaluate();
  *is_best = r.accuracy > state_.best_accuracy;
  if (*is_best) state_.best_accuracy = r.accuracy;
  if (chatty()) {
    const bool mid_epoch = state_.next_batch > 0;
    log() << core::formatted("epoch %lld/%lld%s test loss %.4f acc %.2f%% (%lld %s, %.1f s)%s",
                    static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                    mid_epoch ? (" step " + std::to_string(state_.global_iteration)).c_str() : "", r.loss, r.accuracy,
                    static_cast<long long>(r.examples), task_->predictions_name(), r.seconds, *is_best ? " best" : "")
          << std::endl;
  }
  write_metrics("\"type\":\"eval\",\"epoch\":" + std::to_string(epoch + 1) +
                ",\"iter\":" + std::to_string(state_.global_iteration) + ",\"loss\":" + num(r.loss) +
                ",\"acc\":" + num(r.accuracy) + ",\"lr\":" + num(optimizer_->lr()) + ",\"" + task_->unit() +
                "_s\":" + num(r.seconds > 0 ? r.units / r.seconds : 0.0));
  return r;
}

TrainResult Trainer::train() {
  data::BatchLoader* train_loader = task_->train_loader();
  MT_CHECK(train_loader != nullptr, "this trainer was built for evaluation only");
  // The folder is this run's while train() runs: released on return and on an error alike.
  const std::unique_ptr<RunFolder> folder = claim_output_folder();
  train_start_ = Clock::now();
  // max_steps replaces epochs; either way the run ends after total_iters optimizer steps.
  const int64_t total_iters = config_.max_steps() > 0 ? config_.max_steps() : config_.epochs() * iters_per_epoch_;
  epochs_ = (total_iters + iters_per_epoch_ - 1) / iters_per_epoch_;
  const int64_t print_every = config_.logging().print_every_iters();
  const int64_t record_every =
      config_.logging().metrics_every_iters() > 0 ? config_.logging().metrics_every_iters() : print_every;
  const int64_t ckpt_every_iters = config_.checkpoint().every_iters();
  const int ckpt_every_epochs = config_.checkpoint().every_epochs();
  const int eval_every = config_.eval().every_epochs();
  const int64_t eval_every_iters = config_.eval().every_iters();

  if (chatty()) {
    log() << "model " << config_.model().name() << " (" << model_->num_parameters()
          << " parameters) on " << device_.str() << ", " << core::num_threads() << " threads";
    if (config_.threads() > core::num_threads()) {
      log() << " (threads " << config_.threads() << " lowered to the " << core::num_threads() << " usable cores)";
    }
    if (config_.precision() != "fp32") log() << ", precision " << config_.precision();
    if (const optim::DynamicLossScaler* scaler = optimizer_->loss_scaler()) {
      log() << ", " << (scaler->dynamic() ? "dynamic" : "static") << " loss scale " << scaler->scale();
    }
    log() << "\n"
          << "train: " << task_->describe_train() << ", " << iters_per_epoch_
          << " iterations/epoch of " << config_.data().batch_size();
    if (config_.max_steps() > 0) log() << ", " << total_iters << " steps (max_steps)";
    log() << "\n"
          << "test:  " << task_->describe_test() << "\n"
          << "output: " << output_dir_ << std::endl;
    if (group_) {
      log() << "distributed: " << sync_->name() << ", process group " << group_->describe() << "; batch "
            << config_.data().batch_size() << " per rank x " << job_->world_size() << " ranks";
      if (accumulation_ > 1) log() << " x " << accumulation_ << " micro-batches";
      log() << " = " << config_.data().batch_size() * job_->world_size() * accumulation_
            << " per step" << std::endl;
    } else if (config_.dist().algorithm() != "ssgd") {
      // One process exchanges nothing: S-SGD is plain SGD, every other algorithm is not run.
      log() << "note: dist.algorithm \"" << config_.dist().algorithm() << "\" is not used: this is one process, "
            << "which trains with plain SGD. Start several with `mintrain launch --nproc-per-node N -- train ...`, "
            << "or set dist.force_distributed: true to run its code path in one process" << std::endl;
    }
    for (const std::string& unused : dist::unselected_algorithm_settings(config_.dist()))
      log() << "warning: " << unused << " is set but dist.algorithm is \"" << config_.dist().algorithm()
            << "\": its settings are not used (set dist.algorithm \"" << unused.substr(5) << "\" to run it)"
            << std::endl;
  }

  TrainResult result;
  // A resume into another global batch counts iterations anew: the starting point in this
  // count stands for the checkpoints set aside (see RunFolder::continue_from).
  if (resumed_at_.recounted()) result.last_checkpoint = save_checkpoint();
  auto stop_requested = [&] {
    const bool at_limit = options_.stop_at_iteration >= 0 && state_.global_iteration >= options_.stop_at_iteration;
    return at_limit || job_->stop_vote(options_.stop_flag && options_.stop_flag->load());
  };
  bool warned_contention = false;

  model_->train();
  while (state_.epoch < epochs_ && state_.global_iteration < total_iters) {
    const int64_t epoch = state_.epoch;
    train_loader->start_epoch(epoch, state_.next_batch * accumulation_);

    // Progress window: what the next progress line or metrics record averages over.
    auto window_start = Clock::now();
    double window_wait_start = train_loader->wait_seconds();
    data::LoaderStats window_data = train_loader->stats();
    core::CpuSchedTimes window_cpu = core::cpu_sched_times();
    const optim::DynamicLossScaler* scaler = optimizer_->loss_scaler();
    const int64_t overflows_before = scaler ? scaler->overflow_steps() : 0;
    double window_loss = 0.0, window_norm = 0.0;
    int64_t window_correct = 0, window_predictions = 0, window_units = 0, window_iters = 0, window_norms = 0;

    data::Batch batch;
    while (state_.next_batch < iters_per_epoch_ && state_.global_iteration < total_iters) {
      if (stop_requested()) {
        result.interrupted = true;
        break;
      }
      const double lr = schedule_->lr_at(static_cast<double>(epoch) +
                                         static_cast<double>(state_.next_batch) / iters_per_epoch_);
      optimizer_->set_lr(lr);
      // k micro-batches (gradient accumulation), then one synchronized optimizer step.
      double step_loss = 0.0;
      for (int micro = 0; micro < accumulation_; ++micro) {
        MT_CHECK(train_loader->next(batch), "the training loader ended after ",
                 state_.next_batch * accumulation_ + micro, " of ", iters_per_epoch_ * accumulation_,
                 " batches");
        sync_->begin_iteration(state_.global_iteration);
        BatchResult r;
        {
          dist::TimelineSpan span(timeline_.get(), "forward");
          r = task_->run(*model_, batch);
        }
        {
          dist::TimelineSpan span(timeline_.get(), "backward");
          // The mean over all k micro-batches: each contributes 1/k of its mean loss; with
          // loss scaling, times the scale (the step guard divides it out again).
          const double seed = optimizer_->loss_scale() / accumulation_;
          if (seed != 1.0) {
            r.loss.backward(core::Tensor::full(r.loss.shape(), seed, core::DType::Float32, r.loss.device()));
          } else {
            r.loss.backward();
          }
        }
        const double loss_value = r.loss.item();
        step_loss += loss_value / accumulation_;
        window_loss += loss_value * r.predictions;
        window_correct += r.correct;
        window_predictions += r.predictions;
        window_units += r.units;
      }
      // The algorithm ends the exchange; where it leaves the step here, the gradients hold the average.
      if (!sync_->end_iteration(*optimizer_)) {
        dist::TimelineSpan span(timeline_.get(), "optimizer");
        optimizer_->step();
      }
      optimizer_->zero_grad();
      if (bad_step_after_guard(step_loss)) {
        handle_nonfinite_step(step_loss);
      } else {
        nonfinite_in_a_row_ = 0;
        window_norm += optimizer_->last_grad_norm();
        ++window_norms;
      }
      ++state_.global_iteration;
      ++state_.next_batch;
      ++window_iters;

      const bool last_of_epoch = state_.next_batch == iters_per_epoch_ || state_.global_iteration == total_iters;
      // Every N iterations and at the end of each epoch; 0 = at the end of each epoch only.
      const bool print_now = last_of_epoch || (print_every > 0 && state_.global_iteration % print_every == 0);
      const bool record_now = last_of_epoch || (record_every > 0 && state_.global_iteration % record_every == 0);
      if (print_now || record_now) {
        const double secs = seconds_since(window_start);
        const double wait = train_loader->wait_seconds() - window_wait_start;
        const double loss_avg = job_->average(window_loss / window_predictions);
        const double acc = job_->average(100.0 * window_correct / window_predictions);
        const double units_s = secs > 0 ? window_units * job_->world_size() / secs : 0.0;
        const double eta = secs / window_iters * (total_iters - state_.global_iteration);
        const double grad_norm = window_norms > 0 ? window_norm / window_norms : 0.0;
        // What the loader's threads could prepare per second in this window (if never paused).
        const data::LoaderStats data_now = train_loader->stats();
        const double busy = data_now.busy_seconds - window_data.busy_seconds;
        const double decode_s = busy > 0 ? data_now.threads * (data_now.images - window_data.images) / busy : 0.0;
        const std::string unit = task_->unit();
        if (print_now && chatty()) {
          log() << core::formatted("epoch %lld/%lld iter %lld/%lld step %lld/%lld loss %.4f acc %.1f%% lr %s "
                          "%.0f %s/s data-wait %.0f%%",
                          static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                          static_cast<long long>(state_.next_batch), static_cast<long long>(iters_per_epoch_),
                          static_cast<long long>(state_.global_iteration), static_cast<long long>(total_iters),
                          loss_avg, acc, lr_text(lr).c_str(), units_s, unit.c_str(),
                          secs > 0 ? 100.0 * wait / secs : 0.0)
                << (unit == "img" ? core::formatted(" decode %.0f img/s", decode_s) : std::string())
                << " eta " << hms(eta)
                << (job_->world_size() > 1 ? " world " + std::to_string(job_->world_size()) : "")
                << std::endl;
          // Threads that wait for a CPU as long as they run: other processes take the cores.
          const core::CpuSchedTimes cpu = core::cpu_sched_times();
          const double ran = cpu.running - window_cpu.running, waited = cpu.waiting - window_cpu.waiting;
          if (!warned_contention && ran > 0.05 && waited > ran) {
            warned_contention = true;
            // One thread a process already: only fewer processes on these cores helps.
            const std::string advice =
                core::num_threads() > 1
                    ? core::formatted("lower `threads` (now %d; %d usable cores)", core::num_threads(), core::usable_cores())
                    : core::formatted("run fewer ranks on this machine (`threads` is already 1; %d usable cores)",
                             core::usable_cores());
            log() << core::formatted("warning: this process's threads waited %.1f s for a CPU while running %.1f s in the "
                            "last %lld iterations: other processes are using these cores, and training runs at "
                            "half speed or less. Stop the other load, or %s",
                            waited, ran, static_cast<long long>(window_iters), advice.c_str())
                  << std::endl;
          }
          window_cpu = cpu;
        }
        if (record_now) {
          const std::string algorithm = sync_->metrics_fields();
          write_metrics("\"type\":\"train\",\"epoch\":" + std::to_string(epoch + 1) + ",\"iter\":" +
                        std::to_string(state_.global_iteration) + ",\"epoch_iter\":" +
                        std::to_string(state_.next_batch) + ",\"loss\":" + num(loss_avg) + ",\"acc\":" + num(acc) +
                        ",\"lr\":" + num(lr) + ",\"" + unit + "_s\":" + num(units_s) + ",\"grad_norm\":" +
                        num(grad_norm) + (scaler ? ",\"loss_scale\":" + num(scaler->scale()) : std::string()) +
                        (algorithm.empty() ? "" : "," + algorithm));
        }
        window_start = Clock::now();
        window_wait_start = train_loader->wait_seconds();
        window_data = train_loader->stats();
        window_loss = window_norm = 0.0;
        window_correct = window_predictions = window_units = window_iters = window_norms = 0;
      }
      if (eval_every_iters > 0 && state_.global_iteration % eval_every_iters == 0 && !last_of_epoch) {
        bool is_best = false;
        result.last_eval = evaluate_and_report(epoch, &is_best);
        if (is_best) save_checkpoint(/*best=*/true);
      }
      if (ckpt_every_iters > 0 && state_.global_iteration % ckpt_every_iters == 0 && !last_of_epoch) {
        result.last_checkpoint = save_checkpoint();
      }
    }
    if (result.interrupted) break;

    // Communication statistics of the epoch (compressed exchanges; "" for the others).
    if (const std::string comm = sync_->epoch_summary(); chatty() && !comm.empty()) {
      log() << "epoch " << epoch + 1 << " " << comm << std::endl;
    }
    if (scaler && chatty()) {
      log() << "epoch " << epoch + 1 << " loss scale " << scaler->scale() << ", "
            << scaler->overflow_steps() - overflows_before << " steps skipped for overflow ("
            << scaler->overflow_steps() << " in total)" << std::endl;
    }
    // End of the epoch, or of the run (max_steps may end it mid-epoch): evaluate, then
    // checkpoint (so the checkpoint knows the best accuracy).
    const bool epoch_done = state_.next_batch == iters_per_epoch_;
    const bool last = state_.global_iteration >= total_iters || (epoch_done && epoch + 1 == epochs_);
    if (epoch_done) {
      state_.epoch = epoch + 1;  // a checkpoint written now resumes at the next epoch
      state_.next_batch = 0;
    }
    bool is_best = false;
    if (last || (eval_every > 0 && (epoch + 1) % eval_every == 0)) result.last_eval = evaluate_and_report(epoch, &is_best);
    if (last || (ckpt_every_epochs > 0 && (epoch + 1) % ckpt_every_epochs == 0)) {
      result.last_checkpoint = save_checkpoint();
    }
    if (is_best) save_checkpoint(/*best=*/true);
    if (last) break;
  }

  if (result.interrupted) {
    result.last_checkpoint = save_checkpoint();
    if (chatty()) {
      log() << "stopped at epoch " << state_.epoch + 1 << " batch " << state_.next_batch
            << " (iteration " << state_.global_iteration << ")";
      if (!result.last_checkpoint.empty()) log() << "; checkpoint " << result.last_checkpoint;
      log() << std::endl;
    }
  }
  if (timeline_) {
    const std::string path = timeline_->write();
    if (chatty()) log() << "timeline: " << path << " (rank 0; one file per rank)" << std::endl;
  }
  job_->drain_stop_vote();
  result.iterations = state_.global_iteration;
  result.best_accuracy = state_.best_accuracy;
  result.seconds = seconds_since(train_start_);
  return result;
}

}  // namespace mt::apps
