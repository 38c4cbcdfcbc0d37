// The dist block of a run config as the algorithms read it. Each algorithm has its own message
// (configs/mintrain.proto: dist.ssgd, dist.cdsgd, dist.dssync, dist.local_sgd, dist.ps,
// dist.compressor); older configs set flat fields (dist.schedule, dist.cdsgd_k, ...), and this file is the one
// place that maps them onto the messages.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mintrain.pb.h"

namespace mt::dist {

// Names in any case, stored in lower case: algorithm, schedules, compressor type, backend and
// transport (flat fields too, where set).
void normalize_dist_names(mintrain::DistConfig& dist);

// The config with every flat field that is set moved onto its message field and cleared. A
// flat field and its message field both set (to different values) is an Error naming both;
// dist.comm_profile, which training no longer reads, is an Error naming dist.ssgd.alpha/beta.
mintrain::DistConfig resolve_dist_config(const mintrain::DistConfig& dist);

// Runs `fn`; an Error from it that names a message field which `written` sets as a flat field
// names the flat field instead, as the config wrote it, and says its new name.
void with_written_names(const mintrain::DistConfig& written, const std::function<void()>& fn);

// Every check of the dist block, in every run (one process too, so a typo fails before the
// launch): the fields common to all algorithms, then each registered algorithm's message.
void validate_dist_config(const mintrain::DistConfig& dist);

// Whether the configured algorithm runs parameter servers beside the workers ("ps", and
// "bytescheduler" or "dlcp" with architecture "ps"), and the partition size the servers must check.
bool uses_parameter_servers(const mintrain::DistConfig& dist);
int64_t server_partition_bytes(const mintrain::DistConfig& dist);
// What a job started with servers but an algorithm that uses none is told to do: the algorithms
// above, and the alternative of starting no servers.
extern const char* const kUseParameterServersHint;

// Checks for the algorithms' validate functions; errors read "<field> must be >= <min> (got v)".
void check_at_least(const std::string& field, double value, double min);
void check_above(const std::string& field, double value, double min);
void check_name(const std::string& field, const std::string& value, const std::vector<std::string>& valid);

}  // namespace mt::dist
