// S-SGD's checkpoint state ("sync.ssgd.*"): the decisions that fix each element's summation
// order (bucket layout, FUSION's rebuild, MG-WFBP's profile, plan and cost) and the settings they
// were made under (schedule, world size, parameter sizes, bucket caps, MG-WFBP's profile_iters
// and configured alpha/beta), so a resumed run packs exactly as the stopped one. Rank-independent:
// rank 0's state restores every rank. The communication hook's entries follow (compressing_hook.h:
// residuals and velocities, every rank's after prepare_checkpoint) and are restored in every case.
//
// load_state_dict before setup keeps the state and applies it at the end of setup. Otherwise:
//  - no "ssgd.*" entries (another algorithm's or an older checkpoint): nothing restored; the
//    buckets go on from the initial layout (rank 0 logs a note for FUSION and MGWFBP);
//  - parameter count or sizes differ, or a malformed entry: an Error naming the entry;
//  - another schedule, or a setting that shaped the layout differs (bucket caps for FUSION;
//    world size, profile_iters, configured alpha/beta for MGWFBP): rank 0 logs a note naming
//    the difference and the synchronizer keeps its fresh layout (rebuilt or re-profiled as in a
//    new run);
//  - otherwise the same buckets, progress and plan as the stopped run.
#include <bit>
#include <map>
#include <ostream>

#include "core/error.h"
#include "core/strings.h"
#include "dist/ssgd/ssgd_synchronizer.h"

namespace mt::dist {
namespace {

// Bumped when the meaning of an "ssgd.*" entry changes. The schedule is stored as its Schedule
// enumerator (BSP 0, WFBP 1, FUSION 2, MGWFBP 3).
constexpr int64_t kStateFormat = 1;

Tensor int64_tensor(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

// Tensors have no float64: doubles travel as their bit patterns, so they come back exactly.
Tensor float64_bits_tensor(const std::vector<double>& values) {
  std::vector<int64_t> bits;
  for (double v : values) bits.push_back(std::bit_cast<int64_t>(v));
  return int64_tensor(bits);
}

std::string text_of(double v) { return core::formatted("%g", v); }

// The "ssgd.*" entries of a checkpoint's synchronizer state, read with checks that name the entry.
class StateReader {
 public:
  explicit StateReader(const core::StateDict& state) {
    for (const auto& [name, t] : state)
      if (name.rfind("ssgd.", 0) == 0) entries_.emplace(name, t);
  }
  bool empty() const { return entries_.empty(); }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }

  // count < 0: any number of values.
  std::vector<int64_t> ints(const std::string& name, int64_t count) const {
    const auto it = entries_.find(name);
    MT_CHECK(it != entries_.end(), "checkpoint entry sync.", name,
             " is missing: the S-SGD state is incomplete (a damaged checkpoint?)");
    const Tensor t = it->second.to(core::Device::cpu()).contiguous();
    MT_CHECK(t.dtype() == core::DType::Int64 && (count < 0 || t.numel() == count), "checkpoint entry sync.",
             name, " must hold ", count < 0 ? std::string("int64 values") : std::to_string(count) + " int64 values",
             ", got ", t.str());
    const int64_t* data = t.data<int64_t>();
    return std::vector<int64_t>(data, data + t.numel());
  }

  std::vector<double> doubles(const std::string& name, int64_t count) const {
    std::vector<double> out;
    for (int64_t bits : ints(name, count)) out.push_back(std::bit_cast<double>(bits));
    return out;
  }

 private:
  std::map<std::string, Tensor> entries_;
};

}  // namespace

core::StateDict SsgdSynchronizer::state_dict() const {
  const size_t P = params_.size();
  if (P == 0) return {};  // not set up (or nothing to train): no decision made yet
  std::vector<int64_t> numel, layout(2 * P);
  for (const auto& p : params_) numel.push_back(p.numel());
  // The same shape as the plan broadcast: [parameter at position k ..., its bucket ...].
  size_t k = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t p : buckets_[b].params()) {
      layout[k] = static_cast<int64_t>(p);
      layout[P + k] = static_cast<int64_t>(b);
      ++k;
    }
  core::StateDict state = {
      {"ssgd.format", int64_tensor({kStateFormat})},
      {"ssgd.settings",
       int64_tensor({static_cast<int64_t>(options_.schedule), world_size(), options_.profile_iters,
                     std::bit_cast<int64_t>(options_.bucket_cap_mb),
                     std::bit_cast<int64_t>(options_.first_bucket_cap_mb),
                     std::bit_cast<int64_t>(options_.alpha), std::bit_cast<int64_t>(options_.beta)})},
      {"ssgd.param_numel", int64_tensor(numel)},
      {"ssgd.buckets", int64_tensor(layout)},
      {"ssgd.progress", int64_tensor({communicated_iters_, profile_.iterations, profile_.plan_ready ? 1 : 0})},
      {"ssgd.cost", float64_bits_tensor({cost_.alpha, cost_.beta, cost_.gamma})},
  };
  if (!profile_.hook_order.empty())
    state.emplace_back("ssgd.hook_order", int64_tensor(std::vector<int64_t>(profile_.hook_order.begin(), profile_.hook_order.end())));
  if (!profile_.sums.empty()) state.emplace_back("ssgd.backward_sums", float64_bits_tensor(profile_.sums));
  if (!profile_.means.empty()) state.emplace_back("ssgd.backward_means", float64_bits_tensor(profile_.means));
  hook_->append_state(state);
  return state;
}

void SsgdSynchronizer::load_state_dict(const core::StateDict& state) {
  if (!set_up_) {
    pending_state_ = state;  // the layout needs the parameters, which setup brings
    return;
  }
  restore_state(state);
}

void SsgdSynchronizer::note(const std::string& text) const {
  if (rank() == 0 && options_.log) *options_.log << "note: " << text << std::endl;
}

void SsgdSynchronizer::restore_state(const core::StateDict& state) {
  // The hook's state is kept in parameter order: a layout rebuilt below carries it over.
  hook_->load_state(state);
  const StateReader in(state);
  const bool layout_evolves = options_.schedule == Schedule::FUSION || options_.schedule == Schedule::MGWFBP;
  if (in.empty()) {
    if (layout_evolves) {
      note("the checkpoint holds no S-SGD bucket state (written by another algorithm or an older "
           "build): " + name() + " starts from its initial bucket layout as a new run does, so the "
           "weights may differ in the last bits from a run that never stopped");
    }
    return;
  }
  const size_t P = params_.size();
  const int64_t format = in.ints("ssgd.format", 1)[0];
  MT_CHECK(format == kStateFormat, "checkpoint entry sync.ssgd.format is ", format,
           "; this build reads S-SGD state format ", kStateFormat);
  const std::vector<int64_t> numel = in.ints("ssgd.param_numel", -1);
  MT_CHECK(numel.size() == P, "the checkpoint's S-SGD state (sync.ssgd.param_numel) is for a model of ",
           numel.size(), " parameters, this model has ", P,
           "; resume with the model the checkpoint was written with");
  for (size_t p = 0; p < P; ++p) {
    MT_CHECK(numel[p] == params_[p].numel(), "the checkpoint's S-SGD state (sync.ssgd.param_numel) gives "
             "parameter ", p, " ", numel[p], " elements, this model's has ", params_[p].numel(),
             "; resume with the model the checkpoint was written with");
  }

  // Settings that shaped the layout: when one differs the saved layout answers another question,
  // so start afresh (a legitimate change of config, not an error).
  const std::vector<int64_t> settings = in.ints("ssgd.settings", 7);
  MT_CHECK(settings[0] >= 0 && settings[0] <= static_cast<int64_t>(Schedule::MGWFBP),
           "checkpoint entry sync.ssgd.settings names schedule ", settings[0], ", which is no S-SGD schedule");
  const auto saved_schedule = static_cast<Schedule>(settings[0]);
  const double saved_cap = std::bit_cast<double>(settings[3]), saved_first_cap = std::bit_cast<double>(settings[4]);
  const double saved_alpha = std::bit_cast<double>(settings[5]), saved_beta = std::bit_cast<double>(settings[6]);
  std::vector<std::string> differ;
  if (saved_schedule != options_.schedule) {
    differ.push_back("dist.ssgd.schedule " + schedule_name(saved_schedule));
  } else if (options_.schedule == Schedule::FUSION) {
    if (saved_cap != options_.bucket_cap_mb) differ.push_back("dist.ssgd.bucket_cap_mb " + text_of(saved_cap));
    if (saved_first_cap != options_.first_bucket_cap_mb)
      differ.push_back("dist.ssgd.first_bucket_cap_mb " + text_of(saved_first_cap));
  } else if (options_.schedule == Schedule::MGWFBP) {
    // The plan comes from timings on that many ranks with that cost model.
    if (settings[1] != world_size()) differ.push_back(std::to_string(settings[1]) + " ranks");
    if (settings[2] != options_.profile_iters) differ.push_back("dist.ssgd.profile_iters " + std::to_string(settings[2]));
    auto given = [](double v) { return v >= 0 ? text_of(v) : std::string("measured"); };
    if (saved_alpha != options_.alpha) differ.push_back("dist.ssgd.alpha " + given(saved_alpha));
    if (saved_beta != options_.beta) differ.push_back("dist.ssgd.beta " + given(saved_beta));
  }
  if (!differ.empty()) {
    note("the checkpoint's S-SGD buckets were made with " + core::join(differ) + " (this run: " + name() +
         "): starting the buckets afresh as a new run does, so the weights may differ in the last "
         "bits from a run that never stopped");
    return;
  }

  // The layout: every parameter exactly once, buckets numbered 0, 1, ... in launch order.
  const std::vector<int64_t> layout = in.ints("ssgd.buckets", static_cast<int64_t>(2 * P));
  std::vector<std::vector<size_t>> groups;
  std::vector<bool> placed(P, false);
  for (size_t k = 0; k < P; ++k) {
    const int64_t p = layout[k], b = layout[P + k];
    MT_CHECK(p >= 0 && p < static_cast<int64_t>(P) && !placed[p], "checkpoint entry sync.ssgd.buckets: "
             "position ", k, " holds parameter ", p, ", which is out of range or appears twice");
    MT_CHECK(b == static_cast<int64_t>(groups.size()) - 1 || b == static_cast<int64_t>(groups.size()),
             "checkpoint entry sync.ssgd.buckets: position ", k, " is in bucket ", b,
             "; buckets must be numbered 0, 1, ... in order");
    if (b == static_cast<int64_t>(groups.size())) groups.emplace_back();
    groups.back().push_back(static_cast<size_t>(p));
    placed[p] = true;
  }
  const std::vector<int64_t> progress = in.ints("ssgd.progress", 3);
  MT_CHECK(progress[0] >= 0 && progress[1] >= 0 && (progress[2] == 0 || progress[2] == 1),
           "checkpoint entry sync.ssgd.progress holds impossible counts (", progress[0], ", ", progress[1],
           ", ", progress[2], ")");
  // alpha, beta, gamma; older checkpoints hold two, or a fourth number (a share of compute lost
  // while a message flies, which training no longer models) and a measured curve (ignored).
  const std::vector<double> cost = in.doubles("ssgd.cost", -1);
  MT_CHECK(cost.size() >= 2 && cost.size() <= 4, "checkpoint entry sync.ssgd.cost must hold 2 to 4 values, got ",
           cost.size());
  const LinkCost restored{cost[0], cost[1], cost.size() >= 3 ? cost[2] : 0.0};
  std::vector<size_t> hook_order;
  if (in.has("ssgd.hook_order")) {
    std::vector<bool> seen(P, false);
    for (int64_t p : in.ints("ssgd.hook_order", static_cast<int64_t>(P))) {
      MT_CHECK(p >= 0 && p < static_cast<int64_t>(P) && !seen[p], "checkpoint entry sync.ssgd.hook_order "
               "holds parameter ", p, ", which is out of range or appears twice");
      seen[p] = true;
      hook_order.push_back(static_cast<size_t>(p));
    }
  }
  std::vector<double> tb_sum, profiled_tb;
  if (in.has("ssgd.backward_sums")) tb_sum = in.doubles("ssgd.backward_sums", static_cast<int64_t>(P));
  if (in.has("ssgd.backward_means")) profiled_tb = in.doubles("ssgd.backward_means", static_cast<int64_t>(P));

  // Everything checked: adopt it.
  build_buckets(groups);
  communicated_iters_ = progress[0];
  profile_.iterations = static_cast<int>(progress[1]);
  profile_.plan_ready = progress[2] == 1;
  cost_ = restored;
  profile_.hook_order = std::move(hook_order);
  profile_.sums = std::move(tb_sum);
  profile_.means = std::move(profiled_tb);
}

}  // namespace mt::dist
