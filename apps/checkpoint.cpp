#include "apps/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <ostream>
#include <regex>
#include <system_error>
#include <type_traits>

#include "apps/run_folder.h"
#include "core/error.h"
#include "core/serialize.h"
#include "core/strings.h"

namespace mt::apps {
namespace {

namespace fs = std::filesystem;

// Bumped when the meaning of a record changes; old files then fail with a clear message.
constexpr const char* kFormat = "mintrain-checkpoint-1";

std::string to_text(double v) { return core::formatted("%.17g", v); }  // round-trips exactly

const std::string& meta(const core::Archive& a, const std::string& path, const std::string& key) {
  auto it = a.meta.find(key);
  MT_CHECK(it != a.meta.end(), "checkpoint \"", path, "\" has no \"", key,
           "\" entry; it was not written by `mintrain train`");
  return it->second;
}

// An entry as a number of type T, the whole entry (an unsigned one has no sign).
template <typename T>
T meta_number(const core::Archive& a, const std::string& path, const std::string& key) {
  const std::string& s = meta(a, path, key);
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const char* what = std::is_floating_point_v<T> ? "a number"
                     : std::is_signed_v<T>         ? "an integer"
                                                   : "an unsigned integer";
  MT_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size(), "checkpoint \"", path, "\": entry \"", key,
           "\" is not ", what, " (\"", s, "\")");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, const layers::Module& model,
                     const optim::Optimizer& optimizer, const dist::Synchronizer& sync,
                     const TrainingState& state) {
  core::Archive a;
  a.meta["format"] = kFormat;
  a.meta["epoch"] = std::to_string(state.epoch);
  a.meta["next_batch"] = std::to_string(state.next_batch);
  a.meta["global_iteration"] = std::to_string(state.global_iteration);
  a.meta["best_accuracy"] = to_text(state.best_accuracy);
  a.meta["rng_seed"] = std::to_string(state.rng_seed);
  a.meta["rng_offset"] = std::to_string(state.rng_offset);
  a.meta["config"] = state.config_text;
  a.meta["synchronizer"] = sync.name();
  a.meta["world_size"] = std::to_string(state.world_size);
  a.meta["batch_size"] = std::to_string(state.batch_size);
  a.meta["accumulation"] = std::to_string(state.accumulation);
  a.meta["elapsed_seconds"] = to_text(state.elapsed_seconds);
  if (state.loss_scale) {
    a.meta["loss_scale"] = to_text(state.loss_scale->scale);
    a.meta["loss_scale_good_steps"] = std::to_string(state.loss_scale->good_steps);
    a.meta["loss_scale_overflow_steps"] = std::to_string(state.loss_scale->overflow_steps);
  }
  a.add("model.", model.state_dict());
  a.add("optim.", optimizer.state_dict());
  a.add("sync.", sync.state_dict());
  core::save_archive(path, a);
}

TrainingState read_training_state(const core::Archive& a, const std::string& path) {
  const std::string& format = meta(a, path, "format");
  MT_CHECK(format == kFormat, "checkpoint \"", path, "\" has format \"", format,
           "\"; this build reads \"", kFormat, "\"");

  TrainingState s;
  s.epoch = meta_number<int64_t>(a, path, "epoch");
  s.next_batch = meta_number<int64_t>(a, path, "next_batch");
  s.global_iteration = meta_number<int64_t>(a, path, "global_iteration");
  s.rng_seed = meta_number<uint64_t>(a, path, "rng_seed");
  s.rng_offset = meta_number<uint64_t>(a, path, "rng_offset");
  s.config_text = meta(a, path, "config");
  s.best_accuracy = meta_number<double>(a, path, "best_accuracy");
  MT_CHECK(s.epoch >= 0 && s.next_batch >= 0 && s.global_iteration >= 0, "checkpoint \"", path,
           "\" has a negative epoch, batch or iteration");
  if (a.meta.count("world_size")) {  // the job's shape (absent in older checkpoints)
    s.world_size = meta_number<int64_t>(a, path, "world_size");
    s.batch_size = meta_number<int64_t>(a, path, "batch_size");
    s.accumulation = meta_number<int64_t>(a, path, "accumulation");
    s.elapsed_seconds = meta_number<double>(a, path, "elapsed_seconds");
    MT_CHECK(s.world_size >= 0 && s.batch_size >= 0 && s.accumulation >= 0 &&
                 std::isfinite(s.elapsed_seconds) && s.elapsed_seconds >= 0,
             "checkpoint \"", path, "\" has an invalid job shape (world size ", s.world_size, ", batch ",
             s.batch_size, ", micro-batches ", s.accumulation, ", ", s.elapsed_seconds, " s)");
  }
  if (a.meta.count("loss_scale")) {
    optim::LossScalerState ls;
    ls.scale = meta_number<double>(a, path, "loss_scale");
    ls.good_steps = meta_number<int64_t>(a, path, "loss_scale_good_steps");
    ls.overflow_steps = meta_number<int64_t>(a, path, "loss_scale_overflow_steps");
    MT_CHECK(std::isfinite(ls.scale) && ls.scale > 0 && ls.good_steps >= 0 && ls.overflow_steps >= 0,
             "checkpoint \"", path, "\" has an invalid loss scale ", ls.scale, " (good steps ",
             ls.good_steps, ", overflow steps ", ls.overflow_steps, ")");
    s.loss_scale = ls;
  }
  return s;
}

void restore_checkpoint(const core::Archive& a, const std::string& path, layers::Module* model,
                        optim::Optimizer* optimizer, dist::Synchronizer* sync) {
  // Restoring into the wrong model or optimizer fails inside load_state_dict with the names
  // or shapes that differ; add which file it was.
  try {
    if (model != nullptr) model->load_state_dict(a.with_prefix("model."), /*strict=*/true);
    if (optimizer != nullptr) optimizer->load_state_dict(a.with_prefix("optim."));
    if (sync != nullptr) sync->load_state_dict(a.with_prefix("sync."));
  } catch (const core::Error& e) {
    MT_FAIL("checkpoint \"", path, "\" does not fit this run (was it written with another model "
            "or optimizer config?): ", e.what());
  }
}

TrainingState load_checkpoint(const std::string& path, layers::Module* model,
                              optim::Optimizer* optimizer, dist::Synchronizer* sync) {
  const core::Archive a = core::load_archive(path);
  TrainingState s = read_training_state(a, path);
  restore_checkpoint(a, path, model, optimizer, sync);
  return s;
}

std::string load_matching_weights(const std::string& path, layers::Module& model) {
  const core::Archive a = core::load_archive(path);
  (void)read_training_state(a, path);  // the format check: only our checkpoints
  const core::StateDict theirs_list = a.with_prefix("model.");
  const std::map<std::string, core::Tensor> theirs(theirs_list.begin(), theirs_list.end());
  const core::StateDict ours = model.state_dict();
  core::StateDict matching;
  std::vector<std::string> skipped;
  for (const auto& [name, tensor] : ours) {
    const auto it = theirs.find(name);
    if (it == theirs.end()) {
      skipped.push_back(name + " (not in the checkpoint)");
    } else if (it->second.shape() != tensor.shape()) {
      skipped.push_back(name + " (shape " + core::shape_str(it->second.shape()) + " there, " +
                        core::shape_str(tensor.shape()) + " here)");
    } else {
      matching.emplace_back(name, it->second);
    }
  }
  MT_CHECK(!matching.empty(), "--weights \"", path, "\": none of this model's ", ours.size(),
           " tensors is in the checkpoint with the same name and shape; was it written for another ",
           "model? (model.name in its config)");
  model.load_state_dict(matching, /*strict=*/false);
  std::string account = "copied " + std::to_string(matching.size()) + " of " + std::to_string(ours.size()) +
                        " tensors from " + path;
  if (!skipped.empty()) account += "; kept the initial values of " + core::join(skipped);
  return account;
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  MT_CHECK(fs::exists(path, ec), "checkpoint \"", path, "\" does not exist; pass a .ckpt file or ",
           "a folder holding checkpoints (e.g. runs/NAME/checkpoints)");
  if (!fs::is_directory(path, ec)) return path;
  for (const fs::path& dir : {fs::path(path), fs::path(path) / "checkpoints"}) {
    const auto files = CheckpointDir::list(dir.string());
    if (!files.empty()) return files.back();
  }
  MT_FAIL("no checkpoint (iter-NNN.ckpt) in \"", path, "\" or \"", path,
          "/checkpoints\"");
}

CheckpointDir::CheckpointDir(std::string dir, int keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  MT_CHECK(!ec, "cannot create checkpoint folder \"", dir_, "\": ", ec.message(),
           "; set checkpoint.dir or --output to a writable place");
}

std::string CheckpointDir::file_name(int64_t global_iteration) {
  return core::formatted("iter-%09lld.ckpt", static_cast<long long>(global_iteration));
}

std::vector<std::string> CheckpointDir::list(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (iteration_in_name(path) >= 0 && entry.is_regular_file(ec)) out.push_back(path);
  }
  std::ranges::sort(out, {}, [](const std::string& f) { return std::pair(iteration_in_name(f), f); });
  return out;
}

std::string CheckpointDir::save(const layers::Module& model, const optim::Optimizer& optimizer,
                                const dist::Synchronizer& sync, const TrainingState& state, bool best) {
  const std::string path = (fs::path(dir_) / (best ? "best.ckpt" : file_name(state.global_iteration))).string();
  save_checkpoint(path, model, optimizer, sync, state);
  if (keep_last_ > 0 && !best) {
    // The file just written is never rotated out, whatever the other names say.
    const auto files = list(dir_);
    for (size_t i = 0; i + keep_last_ < files.size(); ++i) {
      if (files[i] == path) continue;
      std::error_code ec;
      fs::remove(files[i], ec);  // best effort: a stale old file is harmless
    }
  }
  return path;
}

int64_t CheckpointDir::iteration_in_name(const std::string& path) {
  static const std::regex kName("iter-([0-9]{1,18})\\.ckpt");  // file_name's names
  const std::string name = fs::path(path).filename().string();
  std::smatch m;
  return std::regex_match(name, m, kName) ? std::stoll(m[1].str()) : -1;
}

CheckpointDir::Intact CheckpointDir::newest_intact(const std::string& dir, std::ostream* warnings) {
  Intact found;
  const std::vector<std::string> files = list(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      (void)core::load_archive(*it);
      found.file = *it;
      return found;
    } catch (const core::Error& e) {
      if (warnings) *warnings << "mintrain: warning: skipping damaged checkpoint: " << e.what() << std::endl;
      found.damaged.push_back(*it);
    }
  }
  MT_CHECK(files.empty(), "--resume auto: every checkpoint in \"", dir, "\" is damaged (see the ",
           "warnings above); remove them to start over, or pass --resume FILE");
  return found;
}

CheckpointDir::SetAside CheckpointDir::set_aside_newer_than(const std::string& dir, int64_t global_iteration) {
  std::vector<std::string> newer = list(dir);
  std::erase_if(newer, [&](const std::string& f) { return iteration_in_name(f) <= global_iteration; });
  SetAside moved;
  if (newer.empty()) return moved;
  moved.folder = RunFolder::unused_name((fs::path(dir) / "superseded-").string() + RunFolder::timestamp());
  std::error_code ec;
  fs::create_directories(moved.folder, ec);
  MT_CHECK(!ec, "cannot create \"", moved.folder, "\" to set aside the checkpoints newer than the one resumed: ",
           ec.message());
  for (const std::string& f : newer) {
    fs::rename(f, fs::path(moved.folder) / fs::path(f).filename(), ec);
    MT_CHECK(!ec, "cannot move \"", f, "\" into \"", moved.folder, "\": ", ec.message());
    moved.names.push_back(fs::path(f).filename().string());
  }
  return moved;
}

std::string CheckpointDir::set_aside_damaged(const std::vector<std::string>& files) {
  std::string note;
  for (const std::string& f : files) {
    std::error_code ec;
    if (!fs::exists(f, ec)) continue;  // another rank's --resume auto moved it already
    const std::string to = RunFolder::unused_name(f + ".damaged");
    fs::rename(f, to, ec);
    MT_CHECK(!ec, "cannot move the damaged checkpoint \"", f, "\" aside to \"", to, "\": ", ec.message(),
             "; move or remove it by hand");
    note += std::string(note.empty() ? "the damaged checkpoint " : ", ") + f + " was moved to " + to;
  }
  if (!note.empty()) note += " (out of the rotation: it no longer counts toward checkpoint.keep_last)";
  return note;
}

}  // namespace mt::apps
