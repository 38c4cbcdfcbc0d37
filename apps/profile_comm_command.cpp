#include "apps/profile_comm_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <ostream>
#include <set>
#include <sstream>

#include "apps/flags.h"
#include "core/atomic_write.h"
#include "core/error.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "dist/comm/rendezvous.h"

namespace mt::apps {
namespace {

namespace fs = std::filesystem;

const char* kProfileCommUsage =
    "usage: mintrain launch --nproc-per-node N -- profile-comm [--out FILE.json]\n"
    "           [--sizes 256,2048,...] [--repeats R] [--seconds-per-size S] [--max-repeats R]\n"
    "           [--idle-ms X]\n"
    "           [--no-gamma] [--gamma-rounds K] [--gamma-messages M] [--gamma-chunk-ms X]\n"
    "           [--gamma-message-floats F]\n"
    "           [--dssync-group-size G [--dssync-ranks-per-rack R] [--dssync-sizes 65536,...]\n"
    "            [--dssync-repeats R] [--dssync-compute-ms X]]\n"
    "           [--interface IF] [--transport tcp] [--timeout-seconds S] [--threads T]\n"
    "  every rank runs it (at least 2, started as for `train`); rank 0 prints a table and writes the\n"
    "  JSON that `mintrain model CONFIG --comm-profile FILE.json` reads. Defaults: --sizes (float32\n"
    "  values per message) 256,2048,16384,131072,524288,1048576, each size at least --repeats 4 times\n"
    "  and more until --seconds-per-size 0.3 (0: exactly --repeats), at most --max-repeats 64;\n"
    "  --idle-ms X: every size again after X ms of compute (about an iteration's forward + backward);\n"
    "  gamma from --gamma-rounds rounds of --gamma-messages chunks of --gamma-chunk-ms of compute,\n"
    "  each followed by a message of --gamma-message-floats 4096 (--no-gamma skips it);\n"
    "  --dssync-group-size G: also DS-Sync's group averages, all groups at once (with\n"
    "  --dssync-compute-ms X: in step after X ms of compute); --interface: the one Gloo binds.\n"
    "  apps/README.md, \"Measured networks\", says what each measurement is for.";

std::vector<int64_t> parse_sizes(const std::string& flag, const std::string& text) {
  const std::vector<int64_t> sizes = parse_int_list(flag, text, 1, int64_t{1} << 30, "a message size (float32 values)");
  // The fit needs two distinct sizes; one size would give beta from nothing.
  MT_CHECK(std::set<int64_t>(sizes.begin(), sizes.end()).size() >= 2, "profile-comm: ", flag, " needs at least two different sizes to fit alpha and beta, "
           "got \"", text, "\"");
  return sizes;
}

}  // namespace

std::string comm_profile_table(const dist::CommProfile& p) {
  std::ostringstream os;
  const double n = p.world;
  // A ring allreduce moves 2(n-1)/n of the message over every link: the link rate that the
  // time implies, comparable with a NIC's nominal rate.
  const double ring_share = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  os << "communication profile: " << p.group << "; rank 0's times, " << p.bytes.size() << " in all over "
     << p.size_bytes.size() << " sizes back to back";
  const bool idle = !p.cost.idle_measured_seconds.empty();
  if (idle)
    os << ", " << p.idle_bytes.size() << " more after " << core::formatted("%.1f", p.idle_before_seconds * 1e3) << " ms idle each";
  const bool busy = !p.cost.busy_measured_seconds.empty();
  if (busy) os << ", " << p.busy_bytes.size() << " more while every rank computed";
  os << "\n";
  os << core::formatted("%12s %12s %7s %11s %11s %11s %13s %14s%s%s\n", "bytes", "floats", "runs", "mean* ms",
                        "min ms", "fit ms", "payload MB/s", "link Gbit/s", idle ? "  after idle ms" : "",
                        busy ? "  computing ms" : "");
  for (size_t s = 0; s < p.size_bytes.size(); ++s) {
    const double bytes = p.size_bytes[s], mean = p.size_mean_seconds[s];
    double fastest = mean;
    int runs = 0;
    for (size_t i = 0; i < p.bytes.size(); ++i)
      if (p.bytes[i] == bytes) fastest = std::min(fastest, p.seconds[i]), ++runs;
    const double rate = mean > 0 ? bytes / mean : 0.0;
    const double line_seconds = p.cost.alpha + p.cost.beta * bytes;  // the fit, not the curve
    os << core::formatted("%12.0f %12.0f %7d %11.3f %11.3f %11.3f %13.1f %14.3f", bytes, bytes / 4, runs, mean * 1e3,
                          fastest * 1e3, line_seconds * 1e3, rate / 1e6, rate * ring_share * 8 / 1e9);
    // Rank 0's after-idle and during-compute means of this size (the cost keeps the sizes sorted).
    const auto& sizes = p.cost.measured_bytes;
    const size_t k = static_cast<size_t>(std::find(sizes.begin(), sizes.end(), bytes) - sizes.begin());
    if (idle && k < sizes.size()) os << core::formatted("%15.3f", p.cost.idle_measured_seconds[k] * 1e3);
    if (busy && k < sizes.size()) os << core::formatted("%14.3f", p.cost.busy_measured_seconds[k] * 1e3);
    os << "\n";
  }
  const double payload_rate = p.cost.beta > 0 ? 1.0 / p.cost.beta : 0.0;
  os << "mean*: without the fastest and slowest 10% of the runs; `mintrain model` uses these times for\n"
        "allreduces on " << p.world << " ranks and the fit (\"fit ms\") to scale to other counts\n";
  if (idle)
    os << "after idle: the same mean* of allreduces that each followed the idle time; the model takes it for a\n"
          "message that follows as much idle network or more, and between the two for less\n";
  if (busy)
    os << "computing: the same mean* while a second thread on every rank computed; the model takes it for the\n"
          "share of a message that overlaps backward\n";
  os << "fit T(M) = alpha + beta * M: alpha " << core::formatted("%.1f", p.cost.alpha * 1e6) << " us, beta "
     << core::formatted("%.4f", p.cost.beta * 1e9) << " ms/MB (MB = 1e6 bytes): effective allreduce bandwidth "
     << core::formatted("%.1f", payload_rate / 1e6) << " MB/s of payload, a ring link rate of "
     << core::formatted("%.3f", payload_rate * ring_share * 8 / 1e9) << " Gbit/s on " << p.world << " ranks\n";
  if (p.chunk_alone_seconds > 0) {
    os << "gamma " << core::formatted("%.1f", p.cost.gamma * 1e6) << " us of compute lost per message sent during "
       << "computation (one compute chunk: " << core::formatted("%.3f", p.chunk_alone_seconds * 1e3) << " ms alone, "
       << core::formatted("%.3f", p.chunk_with_message_seconds * 1e3) << " ms with a message after it); "
       << core::formatted("%.1f", p.cost.overlap_slowdown * 100) << "% of the compute lost while the network is busy\n";
  } else {
    os << "gamma not measured (--no-gamma): 0\n";
  }
  if (p.dssync.group_size > 0 && !p.dssync.patterns.empty()) {
    const dist::DsSyncCommProfile& d = p.dssync;
    os << "DS-Sync groups of " << d.group_size
       << (d.ranks_per_rack > 0 ? " in racks of " + std::to_string(d.ranks_per_rack) + " ranks" : std::string())
       << (d.compute_seconds > 0
               ? ", in step after " + core::formatted("%.1f", d.compute_seconds * 1e3) + " ms of compute each (" +
                     core::formatted("%.1f", d.compute_alone_seconds * 1e3) +
                     " ms with every rank computing): the ranks' mean* iteration beyond that, ms\n"
               : ", all groups of a partition at once" +
                     (p.idle_before_seconds > 0 ? ", each after " + core::formatted("%.1f", p.idle_before_seconds * 1e3) + " ms idle"
                                                : std::string()) +
                     ": the slowest group's mean* ms\n");
    os << core::formatted("%-40s %-8s", "partition", "racks");
    for (double b : d.patterns[0].size_bytes) os << core::formatted(" %12.0f", b);
    os << "  (bytes)\n";
    for (const dist::GroupPatternTimes& g : d.patterns) {
      os << core::formatted("%-40s %-8s", dist::partition_str(g.partition).c_str(),
                            g.crosses_racks ? "crosses" : "inside");
      for (double t : g.size_seconds) os << core::formatted(" %12.3f", t * 1e3);
      os << "\n";
    }
  }
  return os.str();
}

int run_profile_comm_command(const std::vector<std::string>& args, std::ostream& out) {
  dist::CommProfileOptions options;
  std::string out_path;
  dist::ProcessGroupOptions po;
  po.backend = "gloo";  // the profile is taken on the CPU
  po.timeout = std::chrono::seconds(300);
  int threads = 0;
  int dssync_group_size = 0, dssync_ranks_per_rack = 0, dssync_repeats = 0;
  std::vector<int64_t> dssync_sizes;
  Flags f("profile-comm", args, kProfileCommUsage);
  // A duration flag in milliseconds, as seconds; 0 only where `zero_ok`.
  auto seconds_from_ms = [&](bool zero_ok) {
    const double ms = f.number();
    MT_CHECK((zero_ok ? ms >= 0 : ms > 0) && ms <= 10000, "profile-comm: ", f.arg(), " must be in ",
             zero_ok ? "[" : "(", "0, 10000], got ", ms);
    return ms * 1e-3;
  };
  while (f.next()) {
    const std::string& a = f.arg();
    if (a == "--out") out_path = f.value();
    else if (a == "--sizes") options.sizes_floats = parse_sizes(a, f.value());
    else if (a == "--repeats") options.repeats = f.integer(1);
    else if (a == "--seconds-per-size") {
      options.seconds_per_size = f.number();
      MT_CHECK(options.seconds_per_size >= 0 && options.seconds_per_size <= 600,
               "profile-comm: --seconds-per-size must be in [0, 600], got ", options.seconds_per_size);
    } else if (a == "--max-repeats") options.max_repeats = f.integer(1);
    else if (a == "--idle-ms") options.idle_before_seconds = seconds_from_ms(true);
    else if (a == "--no-gamma") options.measure_gamma = false;
    else if (a == "--gamma-rounds") options.gamma_rounds = f.integer(1);
    else if (a == "--gamma-messages") options.gamma_messages = f.integer(1);
    else if (a == "--gamma-message-floats") options.gamma_message_floats = f.integer(1);
    else if (a == "--gamma-chunk-ms") options.gamma_chunk_seconds = seconds_from_ms(false);
    else if (a == "--dssync-group-size") dssync_group_size = f.integer(2);
    else if (a == "--dssync-ranks-per-rack") dssync_ranks_per_rack = f.integer(1);
    else if (a == "--dssync-sizes") dssync_sizes = parse_sizes(a, f.value());
    else if (a == "--dssync-repeats") dssync_repeats = f.integer(1);
    else if (a == "--dssync-compute-ms") options.dssync_compute_seconds = seconds_from_ms(false);
    else if (a == "--interface") po.interface = f.value();
    else if (a == "--transport") {
      po.transport = f.value();
      dist::check_collective_transport(po.transport);
    }
    else if (a == "--timeout-seconds") po.timeout = std::chrono::seconds(f.integer(1));
    else if (a == "--threads") threads = f.integer(1);
    else if (a == "--help" || a == "-h") {
      out << kProfileCommUsage << "\n";
      return 0;
    } else {
      f.unknown();
    }
  }
  if (threads > 0) core::set_num_threads(threads);
  MT_CHECK(dssync_group_size > 0 || (dssync_ranks_per_rack == 0 && dssync_sizes.empty() && dssync_repeats == 0 &&
                                     options.dssync_compute_seconds == 0),
           "profile-comm: --dssync-ranks-per-rack, --dssync-sizes, --dssync-repeats and --dssync-compute-ms describe "
           "DS-Sync's groups; give --dssync-group-size too");

  const dist::WorldInfo world = dist::world_from_env();
  MT_CHECK(world.world_size >= 2, "profile-comm measures communication between ranks, but this is a single "
           "process (no RANK/WORLD_SIZE in the environment, or WORLD_SIZE=1): run it as workers, e.g. "
           "`mintrain launch --nproc-per-node 2 -- profile-comm --out comm.json`");
  MT_CHECK(dssync_group_size <= world.world_size, "profile-comm: --dssync-group-size ", dssync_group_size,
           " is larger than the ", world.world_size, " ranks");
  MT_CHECK(dssync_ranks_per_rack < world.world_size, "profile-comm: --dssync-ranks-per-rack ", dssync_ranks_per_rack,
           " puts all ", world.world_size, " ranks in one rack; leave it out for one rack");
  // Rank 0 writes --out whole at the end (a run that fails leaves no half-written profile), and
  // checks its folder first, so that a bad path fails at once.
  MT_CHECK(world.rank != 0 || out_path.empty() || ::access(fs::absolute(out_path).parent_path().c_str(), W_OK) == 0,
           "profile-comm: cannot write \"", out_path, "\" (--out): does its folder exist?");

  const dist::Rendezvous r = dist::rendezvous(world, po);
  dist::CommProfile profile = dist::profile_communication(*r.group, core::Device::cpu(), options);
  if (dssync_group_size > 0) {
    dist::CommProfileOptions group_options = options;
    if (!dssync_sizes.empty()) group_options.sizes_floats = dssync_sizes;
    if (dssync_repeats > 0) group_options.repeats = dssync_repeats;
    profile.dssync = dist::profile_dssync_groups(*r.group, core::Device::cpu(), dssync_group_size,
                                                 dssync_ranks_per_rack, group_options);
  }
  if (r.group->rank() != 0) return 0;  // rank 0 speaks for the job
  out << comm_profile_table(profile);
  if (profile.cost.beta <= 0) {
    out << "warning: the fit found no cost per byte (beta 0): the times are dominated by noise, and "
           "`mintrain model --comm-profile` will refuse this profile; run again with larger --sizes "
           "(e.g. up to 4194304) or more --repeats, on a quieter machine\n";
  }
  if (!out_path.empty()) {
    core::write_file_atomically(out_path, dist::comm_profile_json(profile));
    out << "wrote " << out_path << " (use it with `mintrain model CONFIG --comm-profile " << out_path << "`)\n";
  }
  out.flush();
  return 0;
}

}  // namespace mt::apps
