// Loading, overriding and validating run configs (configs/mintrain.proto).
//
// A config is read in three steps, in this order, so that command-line overrides are checked
// like everything else:
//   RunConfig cfg = load_config(path);          // text format; errors are file:line:col
//   apply_override(cfg, "optimizer.lr=0.02");    // each --set
//   validate_config(cfg);                        // ranges, registry names, device
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mintrain.pb.h"
#include "optim/lr_schedule.h"

namespace mt::apps {

using RunConfig = mintrain::RunConfig;

// Parses a text-format config. Syntax errors and unknown fields throw core::Error as
// "<source>:<line>:<col>: <message>" (1-based).
RunConfig parse_config(const std::string& text, const std::string& source_name);
RunConfig load_config(const std::string& path);

// Applies one "path.to.field=value" assignment. Strings need no quotes; repeated fields are
// replaced, written as "[1,2,3]" (or one bare value); a message field takes "{ ... }" text.
// An unknown path lists the valid fields at the point where it went wrong; a flat dist field
// of older configs names its new place (as parse_config does).
void apply_override(RunConfig& config, const std::string& assignment);

// Names that select something (model, optimizer, dataset, schedule, dist.algorithm,
// dist.ssgd.schedule, dist.compressor.type, ...) are matched in any case: this writes them the way the
// registries list them (lower case), so "BSP" and "bsp" are the same run.
void normalize_names(RunConfig& config);

// Checks values the schema cannot (every number finite, ranges, names known to the
// registries, device syntax, the dist block's algorithm and its options).
void validate_config(const RunConfig& config);

// A learning-rate warm-up as long as the run or longer (lr_schedule.warmup_epochs against
// max_steps, or epochs): type "linear", which decays from the warm-up's end to the run's, cannot
// run and is a ConfigError naming both and the fix; any other type runs without ever reaching
// optimizer.lr, and the returned warning says so ("" when the warm-up fits). `schedule` is what
// the trainer built from the config, with the run's length in epochs.
std::string check_warmup_fits(const RunConfig& config, const optim::LrScheduleOptions& schedule,
                              int64_t iterations_per_epoch);

// load + every override + normalize + validate: what `mintrain train/eval` do.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);

// The config as text format (saved into the output folder and into checkpoints).
std::string config_to_text(const RunConfig& config);

// The config as every rank of a job must have it, in text format: the same as config_to_text
// except that a GPU index (device "cuda:3") counts as "cuda", since each rank may bind its own.
std::string config_identity_text(const RunConfig& config);

// What differs between two configs in text format, one "field: old -> new" entry per field,
// "; "-separated ("" when they agree). Where the output goes (output_dir) counts only when
// asked (it does not change the training, but the ranks of one job must agree on it). A text
// this build cannot parse is reported as such.
std::string config_differences(const std::string& old_text, const std::string& new_text,
                               bool count_output_dir = false);

}  // namespace mt::apps
