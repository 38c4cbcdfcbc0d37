#include "dist/predict/comm_profile_file.h"

#include <cmath>

#include "core/error.h"
#include "dist/predict/comm_profile.h"
#include "dist/predict/json_file.h"

namespace mt::dist {
namespace {

using nlohmann::json;

// Two arrays of the same length, entry by entry numbers > 0 (a size and its time), appended to
// xs and ys; errors read "<where>: "<x_key>" and "<y_key>" must hold numbers > 0 (entry i)".
void read_positive_pairs(const json& x, const json& y, const std::string& x_key, const std::string& y_key,
                         const std::string& where, std::vector<double>& xs, std::vector<double>& ys) {
  for (size_t i = 0; i < x.size(); ++i) {
    MT_CHECK(x[i].is_number() && y[i].is_number() && x[i].get<double>() > 0 && y[i].get<double>() > 0, where, ": \"",
             x_key, "\" and \"", y_key, "\" must hold numbers > 0 (entry ", i, ")");
    xs.push_back(x[i].get<double>());
    ys.push_back(y[i].get<double>());
  }
}

// profile-comm's "dssync" object (dssync_comm_profile_json).
DsSyncCommProfile read_dssync_patterns(const json& d, const std::string& path) {
  const std::string where = path + ": \"dssync\"";
  MT_CHECK(d.is_object(), where, " must be an object with \"group_size\", \"ranks_per_rack\" and \"patterns\"");
  DsSyncCommProfile p;
  const double g = number_field(d, "group_size", where, true);
  const double rack = number_field(d, "ranks_per_rack", where, true);
  MT_CHECK(g == std::floor(g) && g >= 2 && rack == std::floor(rack), where, ": \"group_size\" must be an integer "
           ">= 2 and \"ranks_per_rack\" an integer >= 0, got ", g, " and ", rack);
  p.group_size = static_cast<int>(g);
  p.ranks_per_rack = static_cast<int>(rack);
  // Timed in step (profile-comm --dssync-compute-ms): the compute per iteration, shown by the model.
  if (d.contains("compute_s")) {
    p.compute_seconds = number_field(d, "compute_s", where, true);
    p.compute_alone_seconds = number_field(d, "compute_alone_s", where, true);
  }
  const auto patterns = d.find("patterns");
  MT_CHECK(patterns != d.end() && patterns->is_array() && !patterns->empty(), where,
           ": \"patterns\" must be a non-empty array");
  for (size_t k = 0; k < patterns->size(); ++k) {
    const json& e = (*patterns)[k];
    const std::string at = where + ".patterns[" + std::to_string(k) + "]";
    MT_CHECK(e.is_object(), at, " must be an object");
    GroupPatternTimes t;
    const auto crosses = e.find("crosses_racks");
    MT_CHECK(crosses != e.end() && crosses->is_boolean(), at, ": \"crosses_racks\" must be true or false");
    t.crosses_racks = crosses->get<bool>();
    const auto bytes = e.find("bytes");
    const auto seconds = e.find("seconds");
    MT_CHECK(bytes != e.end() && seconds != e.end() && bytes->is_array() && seconds->is_array() && !bytes->empty() &&
                 bytes->size() == seconds->size(),
             at, ": \"bytes\" and \"seconds\" must be arrays of the same non-zero length");
    read_positive_pairs(*bytes, *seconds, "bytes", "seconds", at, t.size_bytes, t.size_seconds);
    // The curves are checked as curves (distinct sizes) once, here, not at every N.
    LinearCost check;
    set_measured_curve(check, t.size_bytes, t.size_seconds);
    p.patterns.push_back(std::move(t));
  }
  return p;
}

// The timed allreduces of a profile under `bytes_key` and `seconds_key` (a size and a time each,
// > 0), as their trimmed means per size; false when the file has none.
bool read_timed_sizes(const json& root, const std::string& bytes_key, const std::string& seconds_key,
                      const std::string& path, std::vector<double>& sizes, std::vector<double>& means) {
  const auto bytes = root.find(bytes_key);
  const auto seconds = root.find(seconds_key);
  if (bytes == root.end() || seconds == root.end() || !bytes->is_array() || !seconds->is_array() || bytes->empty())
    return false;
  MT_CHECK(bytes->size() == seconds->size(), path, ": \"", bytes_key, "\" has ", bytes->size(), " entries but \"",
           seconds_key, "\" ", seconds->size());
  std::vector<double> b, t;
  read_positive_pairs(*bytes, *seconds, bytes_key, seconds_key, path, b, t);
  trimmed_mean_per_size(b, t, sizes, means);
  return true;
}

}  // namespace

MeasuredComm read_comm_profile(const std::string& path, const std::string& named_by) {
  const std::string remedy = "; measure one with `mintrain launch --nproc-per-node N -- profile-comm --out " +
                             path + "` (N >= 2 ranks placed like the job)";
  MeasuredComm m;
  try {
    const json root = read_json_file(path, "the communication profile", named_by);
    MT_CHECK(root.is_object(), path, ": expected a JSON object with \"world\", \"alpha_s\", \"beta_s_per_byte\" and "
             "\"gamma_s\"");
    const double world = number_field(root, "world", path, true);
    MT_CHECK(world == std::floor(world) && world >= 2 && world <= (1 << 24), path, ": \"world\" is ", world,
             ", but a communication profile needs at least 2 ranks");
    m.world = static_cast<int>(world);
    m.group = string_field(root, "group");
    m.cost.alpha = number_field(root, "alpha_s", path, true);
    m.cost.beta = number_field(root, "beta_s_per_byte", path, true);
    MT_CHECK(m.cost.beta > 0, path, ": \"beta_s_per_byte\" must be > 0 (the fit found no cost per byte: "
             "the sizes were too small or too close together)");
    m.cost.gamma = number_field(root, "gamma_s", path, true);
    // Profiles from before it was measured have none: the DAG then charges gamma per message.
    m.cost.overlap_slowdown = number_field(root, "overlap_slowdown", path, false);
    MT_CHECK(m.cost.overlap_slowdown < 1, path, ": \"overlap_slowdown\" (the share of the compute lost while a "
             "message is in flight) must be below 1, got ", m.cost.overlap_slowdown);
    // The timed allreduces, when the file has them: their (trimmed) means per size are the
    // measured curve; the same sizes timed after idling (profile-comm --idle-ms), its after-idle one.
    std::vector<double> sizes, means;
    if (read_timed_sizes(root, "bytes", "seconds", path, sizes, means)) {
      set_measured_curve(m.cost, sizes, means);
      if (read_timed_sizes(root, "idle_bytes", "idle_seconds", path, sizes, means)) {
        const double idle = number_field(root, "idle_before_s", path, true);
        MT_CHECK(idle > 0, path, ": \"idle_bytes\" and \"idle_seconds\" need \"idle_before_s\" > 0, got ", idle);
        try {
          set_idle_curve(m.cost, sizes, means, idle);
        } catch (const core::Error& e) {
          MT_FAIL(path, ": \"idle_bytes\" must time the sizes of \"bytes\" again: ", e.what());
        }
      }
      // And while every rank computed (profiles since the during-compute curve have it).
      if (read_timed_sizes(root, "busy_bytes", "busy_seconds", path, sizes, means)) {
        try {
          set_busy_curve(m.cost, sizes, means);
        } catch (const core::Error& e) {
          MT_FAIL(path, ": \"busy_bytes\" must time the sizes of \"bytes\" again: ", e.what());
        }
      }
    }
    if (const auto d = root.find("dssync"); d != root.end()) m.dssync = read_dssync_patterns(*d, path);
  } catch (const core::Error& e) {
    MT_FAIL(e.what(), remedy);
  }
  return m;
}

}  // namespace mt::dist
