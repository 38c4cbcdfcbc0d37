// dist.algorithm "auto": the job picks its own synchronization (README.md). It profiles a few
// iterations as S-SGD BSP, ranks the candidates (candidates.h) with the cost model, runs the
// best few for a short timed trial each and keeps the fastest; it decides again when the
// iteration time drifts (decision.h). Every decision is taken from numbers all ranks agreed on,
// at the same iteration on every rank, between two iterations.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/auto/candidates.h"
#include "dist/auto/decision.h"
#include "dist/auto/server_session.h"
#include "dist/predict/model_profile.h"
#include "dist/registry.h"

namespace mt::dist {

struct AutoOptions : SynchronizerOptions {
  int profile_iters = 5;
  int trials = 3;  // 0: every candidate (the survey)
  int trial_iters = 10;
  double drift_share = 0.25;
  int drift_window = 20;
  int max_redecisions = 2;
  int drift_trial_rounds = 5;  // deciding again, the trials take turns in this many rounds
};

// One decision and its evidence.
struct AutoDecision {
  int64_t iteration = 0;  // the first iteration of the winner
  std::string reason;     // "start", "drift: 0.412 s against 0.301 s", "resumed"
  std::vector<std::string> names;  // ranked, best predicted first
  std::vector<double> predicted, measured;  // seconds per iteration; measured < 0: not tried
  std::vector<int> timed;  // iterations timed per candidate: trial_iters, fewer when ended early
  int rounds = 1;          // the trials took turns in this many rounds
  size_t winner = 0;
  std::string describe() const;  // the log's table
  std::string json() const;      // the metrics file's object
};

// The iterations auto runs before its first decision when it tries every candidate
// (dist.auto.trials 0), each for dist.auto.trial_iters: what `mintrain survey` trains.
int64_t iterations_to_try_all(const mintrain::DistConfig& dist, bool clips_gradients, int servers);

class AutoSynchronizer final : public Synchronizer {
 public:
  // `world_with_servers`: the workers, then the parameter servers (null: the job has none).
  AutoSynchronizer(std::shared_ptr<ProcessGroup> group, mintrain::DistConfig dist, mintrain::OptimizerConfig optimizer,
                   int64_t batch_size, AutoOptions options,
                   std::shared_ptr<ProcessGroup> world_with_servers = nullptr);
  ~AutoSynchronizer() override;  // worker 0 ends the servers' session (not after a failure)
  std::string name() const override;  // "auto(ssgd/mgwfbp)"

  void setup(layers::Module& model, optim::Optimizer& optimizer) override;
  void begin_iteration(int64_t iteration) override;
  bool end_iteration(optim::StepGuard& optimizer) override;
  void prepare_eval(layers::Module& model) override;
  void prepare_checkpoint(layers::Module& model) override;
  bool steps_on_gradient_average() const override { return true; }
  bool keeps_state_per_rank() const override { return false; }
  std::string epoch_summary() override;
  std::string metrics_fields() override;
  core::StateDict state_dict() const override;
  void load_state_dict(const core::StateDict& state) override;

  const std::vector<AutoDecision>& decisions() const { return decisions_; }
  const std::string& current() const { return in_use_.name; }

 private:
  enum class Phase { Profile, Trial, Run };
  using Clock = std::chrono::steady_clock;

  void iteration_done(double seconds);  // the previous iteration's time, between two iterations
  void profile_done();
  // Measures the network, ranks, tries the best (and the incumbent, deciding again).
  void start_trials(const std::string& reason, const std::string& incumbent = "");
  void trials_done();
  size_t tried() const { return tries_; }  // how many of ranked_ the trials run
  bool far_off(int timed);  // collective, while timed < trial_iters: the trial under way ends early
  int slice_iters() const;  // iterations the trial under way times in this round
  void keep_close();        // collective, after each round: the far slower take no more turns
  void retire_current();  // hooks off, batch-norm buffers equal, nothing in flight
  // `state`: what the candidate's synchronizer had learned when it last ran (MG-WFBP's plan,
  // FUSION's buckets), so a trial's later round or the winner goes on without learning again.
  void switch_to(const Candidate& candidate, const core::StateDict& state = {});
  Candidate profiling_candidate() const;
  void time_gradients();  // this rank's grad-ready times, while profiling
  int servers() const { return session_ ? session_->servers() : 0; }
  template <typename F>
  auto failing(F&& f);  // f(), noting a failure: the servers are then not told to end

  std::shared_ptr<ProcessGroup> group_;
  mintrain::DistConfig dist_;
  mintrain::OptimizerConfig optimizer_config_;
  int64_t batch_size_;
  bool clips_;  // optimizer.max_grad_norm > 0: ByteScheduler cannot run (it steps layer by layer)
  AutoOptions options_;
  layers::Module* model_ = nullptr;
  optim::Optimizer* optimizer_ = nullptr;
  std::shared_ptr<ProcessGroup> world_with_servers_;
  std::unique_ptr<ServerSession> session_;  // with parameter servers
  bool failed_ = false;
  int64_t ps_sessions_ = 0;  // parameter-server candidates run so far
  std::unique_ptr<Synchronizer> current_;
  Candidate in_use_;  // what current_ was built from

  Phase phase_ = Phase::Profile;
  ModelProfile profile_;           // what the cost model ranks with, agreed by all ranks
  std::vector<Candidate> ranked_;  // the last ranking
  std::map<std::string, double> misfit_;  // measured over predicted, in the first trials
  std::string reason_;             // why the trials under way began
  std::string incumbent_;          // deciding again: the method in use until then
  std::string profile_reason_ = "start";  // why the profiling under way began
  size_t trial_ = 0;               // the candidate under trial
  size_t slot_ = 0;                // its place in this round
  std::vector<size_t> in_turn_;    // the candidates taking turns (of ranked_)
  size_t tries_ = 0;               // of ranked_, the first tries_ are tried
  int rounds_ = 1, round_ = 0;     // the trials take turns in rounds_ rounds
  int phase_iters_ = 0;            // iterations since the phase (or trial's slice) began
  std::vector<double> sums_;       // this rank's timed seconds per candidate
  std::vector<double> measured_;   // their means
  std::vector<int> timed_;         // and the iterations they are over
  std::vector<core::StateDict> saved_;  // each tried candidate's state when it last ran
  std::vector<AutoDecision> decisions_;
  size_t decisions_reported_ = 0;  // metrics_fields wrote the ones before
  DriftWatch drift_;

  int64_t iteration_ = -1;
  Clock::time_point began_, ended_, micro_batch_began_;
  bool untimed_ = true;  // the next interval spans an evaluation, a checkpoint or a switch
  // The profile: per parameter the summed backward seconds (gaps between grad-ready times in
  // the order they came), forward and update seconds, over the profiled iterations.
  std::vector<Clock::time_point> ready_;
  std::vector<double> backward_;
  double forward_ = 0.0, update_ = 0.0;
  int profiled_ = 0;
};

}  // namespace mt::dist
