#include "dist/registry.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace mt::dist {
namespace {

std::map<std::string, Algorithm>& registry() {
  static std::map<std::string, Algorithm> algorithms;  // built before main, read after
  return algorithms;
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
  std::string names;
  for (const auto& n : algorithm_names()) names += (names.empty() ? "" : ", ") + n;
  MT_FAIL("unknown dist.algorithm \"", name, "\"; valid names are: ", names);
}

std::unique_ptr<Synchronizer> make_synchronizer(std::shared_ptr<ProcessGroup> group, const mintrain::RunConfig& run,
                                                std::string config_text, std::shared_ptr<Timeline> timeline,
                                                std::ostream* log,
                                                std::shared_ptr<ProcessGroup> world_with_servers) {
  if (!group) return std::make_unique<LocalSynchronizer>();
  std::unique_ptr<Synchronizer> sync;
  with_written_names(run.dist(), [&] {
    const mintrain::DistConfig dist = resolve_dist_config(run.dist());
    const Algorithm& algorithm = find_algorithm(dist.algorithm());
    algorithm.validate(dist);
    sync = algorithm.make({group, dist, run.optimizer(), std::move(config_text), std::move(timeline), log,
                           std::move(world_with_servers), run.data().batch_size()});
  });
  return sync;
}

namespace {

namespace pb = google::protobuf;

// Flat field of DistConfig -> its place in the per-algorithm messages ("message.field").
struct Moved {
  const char* flat;
  const char* message;
  const char* field;
};
constexpr Moved kMoved[] = {
    {"schedule", "ssgd", "schedule"},
    {"bucket_cap_mb", "ssgd", "bucket_cap_mb"},
    {"first_bucket_cap_mb", "ssgd", "first_bucket_cap_mb"},
    {"profile_iters", "ssgd", "profile_iters"},
    {"alpha", "ssgd", "alpha"},
    {"beta", "ssgd", "beta"},
    {"gamma", "ssgd", "gamma"},
    {"compression", "compressor", "type"},
    {"compression_tau", "compressor", "tau"},
    {"topk_ratio", "compressor", "topk_ratio"},
    {"topk_warmup_iters", "compressor", "topk_warmup_iters"},
    {"momentum_correction", "compressor", "momentum_correction"},
    {"cdsgd_warmup_iters", "cdsgd", "warmup_iters"},
    {"cdsgd_k", "cdsgd", "k"},
    {"cdsgd_lambda", "cdsgd", "lambda"},
    {"dssync_group_size", "dssync", "group_size"},
    {"dssync_schedule", "dssync", "schedule"},
    {"dssync_cross_period", "dssync", "cross_period"},
    {"dssync_rack", "dssync", "rack"},
    {"dssync_ranks_per_rack", "dssync", "ranks_per_rack"},
    {"dssync_global_average_every", "dssync", "global_average_every"},
    {"dssync_seed", "dssync", "seed"},
    {"dssync_pool_size", "dssync", "pool_size"},
    {"dssync_spread_every", "dssync", "spread_every"},
    {"dssync_measure_racks", "dssync", "measure_racks"},
};

std::string new_name(const Moved& m) { return std::string("dist.") + m.message + "." + m.field; }

bool is_set(const pb::Message& msg, const pb::FieldDescriptor* f) {
  return f->is_repeated() ? msg.GetReflection()->FieldSize(msg, f) > 0 : msg.GetReflection()->HasField(msg, f);
}

// Copies field `from` of `src` onto field `to` of `dst` (the same type; scalars and repeated
// scalars are all the flat fields hold).
void copy_field(const pb::Message& src, const pb::FieldDescriptor* from, pb::Message& dst,
                const pb::FieldDescriptor* to) {
  const pb::Reflection* in = src.GetReflection();
  const pb::Reflection* out = dst.GetReflection();
  MT_CHECK(from->cpp_type() == to->cpp_type() && from->is_repeated() == to->is_repeated(),
           "internal: dist.", from->name(), " and its new field ", to->full_name(), " differ in type");
  if (to->is_repeated()) {
    out->ClearField(&dst, to);
    for (int i = 0; i < in->FieldSize(src, from); ++i) out->AddInt32(&dst, to, in->GetRepeatedInt32(src, from, i));
    return;
  }
  switch (from->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING: out->SetString(&dst, to, in->GetString(src, from)); break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: out->SetDouble(&dst, to, in->GetDouble(src, from)); break;
    case pb::FieldDescriptor::CPPTYPE_INT32: out->SetInt32(&dst, to, in->GetInt32(src, from)); break;
    case pb::FieldDescriptor::CPPTYPE_UINT64: out->SetUInt64(&dst, to, in->GetUInt64(src, from)); break;
    case pb::FieldDescriptor::CPPTYPE_BOOL: out->SetBool(&dst, to, in->GetBool(src, from)); break;
    default: MT_FAIL("internal: dist.", from->name(), " has a type the config mapping does not copy");
  }
}

// The value of field `from` of `src` as a message of `like`'s type holding it alone (to compare).
std::string value_of(const pb::Message& src, const pb::FieldDescriptor* from, const pb::Message& like,
                     const pb::FieldDescriptor* to) {
  std::unique_ptr<pb::Message> one(like.New());
  copy_field(src, from, *one, to);
  return one->SerializeAsString();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

}  // namespace

void normalize_dist_names(mintrain::DistConfig& d) {
  d.set_algorithm(lower(d.algorithm()));
  d.set_backend(lower(d.backend()));
  d.set_transport(lower(d.transport()));
  if (d.has_schedule()) d.set_schedule(lower(d.schedule()));
  if (d.has_compression()) d.set_compression(lower(d.compression()));
  if (d.has_dssync_schedule()) d.set_dssync_schedule(lower(d.dssync_schedule()));
  if (d.ssgd().has_schedule()) d.mutable_ssgd()->set_schedule(lower(d.ssgd().schedule()));
  if (d.ssgd().has_allreduce()) d.mutable_ssgd()->set_allreduce(lower(d.ssgd().allreduce()));
  if (d.ssgd().has_hook()) d.mutable_ssgd()->set_hook(lower(d.ssgd().hook()));
  if (d.compressor().has_type()) d.mutable_compressor()->set_type(lower(d.compressor().type()));
  if (d.dssync().has_schedule()) d.mutable_dssync()->set_schedule(lower(d.dssync().schedule()));
  if (d.ps().has_schedule()) d.mutable_ps()->set_schedule(lower(d.ps().schedule()));
  if (d.bytescheduler().has_architecture())
    d.mutable_bytescheduler()->set_architecture(lower(d.bytescheduler().architecture()));
  if (d.dlcp().has_priority_direction())
    d.mutable_dlcp()->set_priority_direction(lower(d.dlcp().priority_direction()));
  if (d.dlcp().has_spray()) d.mutable_dlcp()->set_spray(lower(d.dlcp().spray()));
  if (d.dlcp().has_architecture()) d.mutable_dlcp()->set_architecture(lower(d.dlcp().architecture()));
}

mintrain::DistConfig resolve_dist_config(const mintrain::DistConfig& written) {
  MT_CHECK(!written.has_comm_profile(), "dist.comm_profile is no longer read by training: give MG-WFBP's "
           "network cost as dist.ssgd.alpha and dist.ssgd.beta (`mintrain profile-comm` measures them), or "
           "leave them unset to time allreduces at start-up");
  mintrain::DistConfig d = written;
  const pb::Descriptor* desc = d.GetDescriptor();
  const pb::Reflection* refl = d.GetReflection();
  for (const Moved& m : kMoved) {
    const pb::FieldDescriptor* flat = desc->FindFieldByName(m.flat);
    const pb::FieldDescriptor* holder = desc->FindFieldByName(m.message);
    MT_CHECK(flat && holder, "internal: dist.", m.flat, " or dist.", m.message, " is not in DistConfig");
    if (!is_set(d, flat)) continue;
    pb::Message* target = refl->MutableMessage(&d, holder);
    const pb::FieldDescriptor* field = target->GetDescriptor()->FindFieldByName(m.field);
    MT_CHECK(field, "internal: ", new_name(m), " is not in the config schema");
    if (is_set(*target, field)) {
      // Both given: fine when they agree, else the config says two things.
      const bool same = value_of(d, flat, *target, field) == value_of(*target, field, *target, field);
      MT_CHECK(same, "the config sets both dist.", m.flat, " (an older name) and ", new_name(m),
               ", to different values; keep ", new_name(m), " only");
    }
    copy_field(d, flat, *target, field);
    refl->ClearField(&d, flat);
  }
  return d;
}

void with_written_names(const mintrain::DistConfig& written, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::Error& e) {
    std::string what = e.what();
    std::vector<std::string> renamed;
    const pb::Descriptor* desc = written.GetDescriptor();
    for (const Moved& m : kMoved) {
      const std::string now = new_name(m);
      const std::string flat = std::string("dist.") + m.flat;
      if (!is_set(written, desc->FindFieldByName(m.flat)) || what.find(now) == std::string::npos) continue;
      if (what.find(flat) != std::string::npos) continue;  // names both already
      replace_all(what, now, flat);
      renamed.push_back(flat + " is now " + now);
    }
    if (renamed.empty()) throw;
    std::string note;
    for (const auto& r : renamed) note += (note.empty() ? "" : "; ") + r;
    throw core::Error(what + " (" + note + ")");
  }
}

bool uses_parameter_servers(const mintrain::DistConfig& d) {
  return d.algorithm() == "ps" || (d.algorithm() == "bytescheduler" && d.bytescheduler().architecture() == "ps") ||
         (d.algorithm() == "dlcp" && d.dlcp().architecture() == "ps");
}

const char* const kUseParameterServersHint =
    "set dist.algorithm \"ps\" (or \"bytescheduler\" or \"dlcp\" with architecture \"ps\") or start no servers";

int64_t server_partition_bytes(const mintrain::DistConfig& d) {
  if (d.algorithm() == "bytescheduler") return d.bytescheduler().partition_bytes();
  if (d.algorithm() == "dlcp") return d.dlcp().partition_bytes();
  return d.ps().partition_bytes();
}

void check_at_least(const std::string& field, double value, double min) {
  MT_CHECK(value >= min, field, " must be >= ", min, " (got ", value, ")");
}

void check_above(const std::string& field, double value, double min) {
  MT_CHECK(value > min, field, " must be > ", min, " (got ", value, ")");
}

void check_name(const std::string& field, const std::string& value, const std::vector<std::string>& valid) {
  if (std::find(valid.begin(), valid.end(), value) != valid.end()) return;
  std::string names;
  for (const auto& n : valid) names += (names.empty() ? "" : ", ") + n;
  MT_FAIL("unknown ", field, " \"", value, "\"; valid names are: ", names);
}

void validate_dist_config(const mintrain::DistConfig& written) {
  with_written_names(written, [&] {
    const mintrain::DistConfig d = resolve_dist_config(written);
    find_algorithm(d.algorithm());  // an unknown name lists the registered ones
    const std::vector<std::string> backends = {"", "gloo", "nccl"}, transports = {"tcp", "ibverbs"};
    MT_CHECK(std::find(backends.begin(), backends.end(), d.backend()) != backends.end(),
             "dist.backend: unknown name \"", d.backend(), "\"; valid names are: \"\" (by device), gloo, nccl");
    MT_CHECK(std::find(transports.begin(), transports.end(), d.transport()) != transports.end(),
             "dist.transport: unknown name \"", d.transport(), "\"; valid names are: tcp, ibverbs");
    check_collective_transport(d.transport());
    MT_CHECK(d.timeout_seconds() >= 1, "dist.timeout_seconds must be >= 1 (got ", d.timeout_seconds(), ")");
    MT_CHECK(d.grad_accumulation_steps() >= 1, "dist.grad_accumulation_steps must be >= 1 (got ",
             d.grad_accumulation_steps(), ")");
    for (const std::string& name : algorithm_names()) find_algorithm(name).validate(d);
  });
}

}  // namespace mt::dist
