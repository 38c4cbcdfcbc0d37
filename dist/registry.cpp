#include "dist/registry.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "core/strings.h"

namespace mt::dist {
namespace {

namespace pb = google::protobuf;

std::map<std::string, Algorithm>& registry() {
  static std::map<std::string, Algorithm> algorithms;  // built before main, read after
  return algorithms;
}

// The string option at `path` (dot-separated, under `msg`): its value, the default where unset.
std::string option_value(const pb::Message& msg, const std::string& path) {
  const size_t dot = path.find('.');
  const pb::FieldDescriptor* f = msg.GetDescriptor()->FindFieldByName(path.substr(0, dot));
  MT_CHECK(f, "internal: the dist block has no field ", path);
  if (dot == std::string::npos) return msg.GetReflection()->GetString(msg, f);
  return option_value(msg.GetReflection()->GetMessage(msg, f), path.substr(dot + 1));
}

// The same option in lower case, where it is set.
void lower_option(pb::Message& msg, const std::string& path) {
  const size_t dot = path.find('.');
  const pb::FieldDescriptor* f = msg.GetDescriptor()->FindFieldByName(path.substr(0, dot));
  MT_CHECK(f, "internal: the dist block has no field ", path);
  const pb::Reflection* r = msg.GetReflection();
  if (!r->HasField(msg, f)) return;
  if (dot != std::string::npos) return lower_option(*r->MutableMessage(&msg, f), path.substr(dot + 1));
  std::string s = r->GetString(msg, f);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  r->SetString(&msg, f, s);
}

void check_names(const Algorithm& a, const mintrain::DistConfig& d) {
  for (const Option& o : a.names) check_name("dist." + o.field, option_value(d, o.field), o.names);
}

}  // namespace

bool register_algorithm(const std::string& name, Algorithm algorithm) {
  MT_CHECK(algorithm.validate && algorithm.make, "internal: algorithm \"", name, "\" registered without functions");
  MT_CHECK(registry().emplace(name, algorithm).second, "internal: algorithm \"", name, "\" registered twice");
  return true;
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const auto& [name, a] : registry()) names.push_back(name);
  return names;
}

const Algorithm& find_algorithm(const std::string& name) {
  const auto it = registry().find(name);
  if (it != registry().end()) return it->second;
  MT_FAIL("unknown dist.algorithm \"", name, "\"; valid names are: ", core::join(algorithm_names()));
}

std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group, const mintrain::RunConfig& run,
                                                std::string config_text, std::shared_ptr<Timeline> timeline,
                                                std::ostream* log,
                                                std::shared_ptr<ProcessGroup> world_with_servers) {
  if (!group) return std::make_unique<LocalSynchronizer>();
  const Algorithm& algorithm = find_algorithm(run.dist().algorithm());
  check_names(algorithm, run.dist());
  algorithm.validate(run.dist());
  return algorithm.make({group, run.dist(), run.optimizer(), {std::move(config_text), std::move(timeline), log},
                         std::move(world_with_servers), run.data().batch_size()});
}

void normalize_dist_names(mintrain::DistConfig& d) {
  for (const char* field : {"algorithm", "backend", "transport"}) lower_option(d, field);
  for (const auto& [name, a] : registry())
    for (const Option& o : a.names) lower_option(d, o.field);
}

void validate_dist_config(const mintrain::DistConfig& d) {
  find_algorithm(d.algorithm());  // an unknown name lists the registered ones
  MT_CHECK(d.backend().empty() || d.backend() == "gloo" || d.backend() == "nccl", "dist.backend: unknown name \"",
           d.backend(), "\"; valid names are: \"\" (by device), gloo, nccl");
  check_name("dist.transport", d.transport(), {"tcp", "ibverbs"});
  check_collective_transport(d.transport());
  check_at_least("dist.timeout_seconds", d.timeout_seconds(), 1);
  check_at_least("dist.grad_accumulation_steps", d.grad_accumulation_steps(), 1);
  for (const auto& [name, a] : registry()) {
    check_names(a, d);
    a.validate(d);
  }
}

bool uses_parameter_servers(const mintrain::DistConfig& d) {
  const Algorithm& a = find_algorithm(d.algorithm());
  if (!a.serve) return false;
  return a.servers_if.field.empty() || option_value(d, a.servers_if.field) == a.servers_if.names.at(0);
}

std::vector<std::string> unselected_algorithm_settings(const mintrain::DistConfig& d) {
  std::vector<std::string> unused;
  const auto selected = registry().find(d.algorithm());
  const std::vector<std::string> read = selected == registry().end() ? std::vector<std::string>{} : selected->second.reads;
  for (const auto& [name, a] : registry()) {
    const auto* field = d.GetDescriptor()->FindFieldByName(name);
    if (name != d.algorithm() && std::find(read.begin(), read.end(), name) == read.end() && field &&
        field->message_type() && d.GetReflection()->HasField(d, field))
      unused.push_back("dist." + name);
  }
  return unused;
}

std::string parameter_servers_hint() {
  // 'set dist.algorithm "ps" (or "dlcp" with architecture "ps") or start no servers'
  std::vector<std::string> always;
  std::map<std::string, std::vector<std::string>> when;  // setting -> the algorithms it turns servers on for
  for (const auto& [name, a] : registry()) {
    if (!a.serve) continue;
    const std::string quoted = "\"" + name + "\"";
    if (a.servers_if.field.empty()) {
      always.push_back(quoted);
    } else {
      const std::string& f = a.servers_if.field;
      when[f.substr(f.rfind('.') + 1) + " \"" + a.servers_if.names.at(0) + "\""].push_back(quoted);
    }
  }
  std::string hint = "set dist.algorithm " + core::join(always, " or ");
  for (const auto& [setting, names] : when) hint += " (or " + core::join(names, " or ") + " with " + setting + ")";
  return hint + " or start no servers";
}

std::string moved_dist_field(const std::string& field) {
  static const std::map<std::string, std::string> kMoved = {
      {"schedule", "ssgd.schedule"}, {"bucket_cap_mb", "ssgd.bucket_cap_mb"},
      {"first_bucket_cap_mb", "ssgd.first_bucket_cap_mb"}, {"profile_iters", "ssgd.profile_iters"},
      {"alpha", "ssgd.alpha"}, {"beta", "ssgd.beta"}, {"gamma", "ssgd.gamma"},
      {"comm_profile", "ssgd.alpha and dist.ssgd.beta"}, {"compression", "compressor.type"},
      {"compression_tau", "compressor.tau"}, {"topk_ratio", "compressor.topk_ratio"},
      {"topk_warmup_iters", "compressor.topk_warmup_iters"},
      {"momentum_correction", "compressor.momentum_correction"}, {"cdsgd_warmup_iters", "cdsgd.warmup_iters"},
      {"cdsgd_k", "cdsgd.k"}, {"cdsgd_lambda", "cdsgd.lambda"}, {"dssync_group_size", "dssync.group_size"},
      {"dssync_schedule", "dssync.schedule"}, {"dssync_cross_period", "dssync.cross_period"},
      {"dssync_rack", "dssync.rack"}, {"dssync_ranks_per_rack", "dssync.ranks_per_rack"},
      {"dssync_global_average_every", "dssync.global_average_every"}, {"dssync_seed", "dssync.seed"},
      {"dssync_pool_size", "dssync.pool_size"}, {"dssync_spread_every", "dssync.spread_every"},
      {"dssync_measure_racks", "dssync.measure_racks"}};
  const auto it = kMoved.find(field);
  return it == kMoved.end() ? "" : "dist." + it->second;
}

void check_at_least(const std::string& field, double value, double min) {
  MT_CHECK(value >= min, field, " must be >= ", min, " (got ", value, ")");
}

void check_above(const std::string& field, double value, double min) {
  MT_CHECK(value > min, field, " must be > ", min, " (got ", value, ")");
}

void check_name(const std::string& field, const std::string& value, const std::vector<std::string>& valid) {
  if (std::find(valid.begin(), valid.end(), value) != valid.end()) return;
  MT_FAIL("unknown ", field, " \"", value, "\"; valid names are: ", core::join(valid));
}

}  // namespace mt::dist
