#include "apps/model_command.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>

#include "apps/flags.h"
#include "apps/task.h"
#include "apps/trainer.h"
#include "core/error.h"
#include "core/random.h"
#include "core/strings.h"
#include "dist/auto/candidates.h"
#include "dist/compress/compression_config.h"
#include "dist/compress/compressor.h"
#include "dist/compress/error_feedback.h"
#include "dist/predict/scaling.h"
#include "dist/comm/rendezvous.h"

namespace mt::apps {
namespace {

using dist::AlgorithmSettings;
using dist::MeasuredComm;
using dist::ModelProfile;
using dist::ScalingRow;

using Clock = std::chrono::steady_clock;
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ---- Measuring ----

// Wait for the device so that a timestamp means "done", not "launched" (CUDA is asynchronous).
void wait_for(const core::Tensor& t) {
  if (t.defined() && t.is_cuda() && t.numel() > 0) (void)t.reshape({-1}).narrow(0, 0, 1).item();
}

// CD-SGD's per-exchange compute on the whole flat gradient of n values, through the calls the
// exchange makes (gradient_exchange.cpp): error feedback + compress (v = g + r; Q(v);
// r <- v - decode(Q(v)), fused where the compressor can), and decoding one payload.
void measure_compression(int64_t n, const dist::CompressionOptions& options, double& compress_s,
                         double& decode_s) {
  compress_s = decode_s = n == 0 ? 0.0 : 1e30;  // the fastest of the timed runs
  if (n == 0) return;
  auto compressor = dist::make_compressor(options);
  core::Generator gen(1234);
  const core::Tensor grad = core::randn({n}, 0.0f, 1.0f, gen);
  dist::ErrorFeedback ef(n);
  for (int r = 0; r < 6; ++r) {  // a warm-up, then 5 timed
    const auto t0 = Clock::now();
    const core::Tensor payload = ef.compress(*compressor, grad);
    const auto t1 = Clock::now();
    const core::Tensor decoded =
        compressor->summable() ? compressor->decompress(payload, n) : compressor->decompress_sum(payload, 1, n);
    const auto t2 = Clock::now();
    if (r == 0) continue;
    compress_s = std::min(compress_s, secs(t1 - t0));
    decode_s = std::min(decode_s, secs(t2 - t1));
  }
}

// ---- Printing ----

// "forward 0", "forward 1", "forward 2" -> "forward 0..2".
std::string compact_path(const std::vector<std::string>& path) {
  std::vector<std::string> out;
  std::string prefix;        // of the numbered run out.back() ends ("" when it is none)
  long first = 0, last = 0;  // its first and last index
  for (const std::string& name : path) {
    const size_t sp = name.rfind(' ');
    const bool numbered = sp != std::string::npos && sp + 1 < name.size() &&
                          std::all_of(name.begin() + sp + 1, name.end(),
                                      [](unsigned char c) { return std::isdigit(c) != 0; });
    const long index = numbered ? std::stol(name.substr(sp + 1)) : 0;
    const long step = first == last ? index - last : (last > first ? 1 : -1);  // the run's direction
    if (numbered && name.substr(0, sp + 1) == prefix && std::labs(index - last) == 1 && index - last == step) {
      last = index;
      out.back() = prefix + std::to_string(first) + ".." + std::to_string(last);
      continue;
    }
    out.push_back(name);
    prefix = numbered ? name.substr(0, sp + 1) : "";
    first = last = index;
  }
  return core::join(out, " > ");
}

// One line of a table: N 6 wide, then every cell 17 wide and every narrow one 9 wide.
std::string table_line(const std::string& n, const std::vector<std::string>& cells,
                       const std::vector<std::string>& narrow = {}) {
  std::string line = core::formatted("%6s", n.c_str());
  for (const std::string& c : cells) line += core::formatted(" %17s", c.c_str());
  for (const std::string& c : narrow) line += core::formatted(" %9s", c.c_str());
  return line + "\n";
}

std::string ms(double seconds) { return core::formatted("%.3f ms", seconds * 1e3); }
std::string mb(double bytes) { return core::formatted("%.3g MB", bytes / (1024.0 * 1024.0)); }

const char* kModelUsage =
    "usage: mintrain model CONFIG [--set k=v ...] [--workers 1,2,4,...] [--at N]\n"
    "                      [--bandwidth-gbps X] [--latency-us Y]\n"
    "                      [--ranks-per-rack R --inter-bandwidth-gbps X --inter-latency-us Y]\n"
    "                      [--allreduce ring|hierarchical] [--profile-iters K] [--warmup-iters W]\n"
    "                      [--layer-times FILE.json] [--save-profile FILE.json]\n"
    "                      [--comm-profile FILE.json[,FILE.json...] [--shared-cores]]\n"
    "                      [--servers S] [--partition-bytes B] [--credit-bytes C]\n"
    "  --comm-profile: the network as `mintrain profile-comm` measured it on n ranks: its latency per\n"
    "    hop replaces --latency-us, its efficiency scales --bandwidth-gbps (without: one level at the\n"
    "    measured rate), and at N = n an allreduce takes its measured time; several files (other n)\n"
    "    calibrate together, each one's times at its own n (apps/README.md, \"Measured networks\")\n"
    "  --shared-cores: also the profile's core-sharing terms (gamma, the compute lost while a message\n"
    "    is in flight, the during-compute curve), for ranks that share CPU cores\n"
    "  --servers S: parameter servers of the PS methods (default dist.ps.servers, or 1); given, the\n"
    "    auto ranking holds the PS candidates too (a job started with S servers);\n"
    "  --partition-bytes B: their and ByteScheduler's largest partition (default dist.ps.partition_bytes);\n"
    "  --credit-bytes C: ByteScheduler's credit (default: the fastest of B x 1, 2, 4, ..., per N)";

// Builds a one-process Trainer from the config and times `iterations` iterations after `warmup`.
ModelProfile profile_model(const RunConfig& config_in, int warmup, int iterations) {
  MT_CHECK(dist::world_from_env().world_size <= 1,
           "mintrain model profiles one process; run it directly, not under a launcher (WORLD_SIZE > 1)");
  RunConfig config = config_in;
  config.mutable_dist()->set_force_distributed(false);

  // The trainer builds the model and optimizer exactly as training would (eval_only: it need
  // not load the training split; our own task below supplies the training batches).
  TrainerOptions topts;
  topts.quiet = true;
  topts.eval_only = true;
  Trainer trainer(config, topts);
  layers::Module& model = trainer.model();
  optim::Optimizer& optimizer = trainer.optimizer();
  TaskContext tctx;
  tctx.device = core::Device::parse(config.device());
  tctx.output_dir = trainer.output_dir();
  std::unique_ptr<Task> task = make_task(config, tctx);
  data::BatchLoader* loader = task->train_loader();
  MT_CHECK(loader != nullptr && loader->batches_per_epoch() > 0, "the training set (",
           task->describe_train(), ") gives no batch to profile with");

  // Grad-ready hooks: every parameter's completion time, in the order they fire.
  const layers::NamedTensors params = model.named_parameters();
  struct Arrivals {
    bool recording = false;
    std::vector<std::pair<size_t, Clock::time_point>> events;
  };
  auto arrivals = std::make_shared<Arrivals>();
  const size_t early = params.size();  // event early + i: parameter i's earlier uses are final
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].second.register_grad_ready_hook([arrivals, i](core::Tensor& leaf) {
      if (!arrivals->recording) return;
      wait_for(leaf.grad());
      arrivals->events.emplace_back(i, Clock::now());
    });
    params[i].second.register_grad_contribution_hook([arrivals, i, early](core::Tensor&, const core::Tensor&, int remaining) {
      if (arrivals->recording && remaining == 1) arrivals->events.emplace_back(early + i, Clock::now());
    });
  }

  model.train();
  std::vector<double> param_backward(params.size(), 0.0);
  std::vector<int> last_position(params.size(), -1);  // position in the last hook order
  std::vector<size_t> early_with(params.size(), early);  // the parameter final next after an early part
  double forward_s = 0.0, tail_s = 0.0, update_s = 0.0;
  int64_t epoch = 0;
  loader->start_epoch(epoch);
  data::Batch batch;
  for (int it = 0; it < warmup + iterations; ++it) {
    if (!loader->next(batch)) {
      loader->start_epoch(++epoch);
      MT_CHECK(loader->next(batch), "the training loader gave no batch in epoch ", epoch);
    }
    const bool profiled = it >= warmup;
    const auto t0 = Clock::now();
    BatchResult r = task->run(model, batch);
    wait_for(r.loss);
    const auto t1 = Clock::now();
    arrivals->events.clear();
    arrivals->recording = true;
    r.loss.backward();
    arrivals->recording = false;
    const auto t2 = Clock::now();
    optimizer.step();
    optimizer.zero_grad();
    if (!params.empty()) wait_for(params[0].second);
    const auto t3 = Clock::now();
    if (!profiled) continue;
    forward_s += secs(t1 - t0);
    Clock::time_point prev = t1;
    std::vector<size_t> pending;  // early parts waiting for the next parameter to be final
    for (size_t k = 0; k < arrivals->events.size(); ++k) {
      const auto& [p, when] = arrivals->events[k];
      if (p >= early) {
        pending.push_back(p - early);
        continue;
      }
      for (size_t i : pending) early_with[i] = p;
      pending.clear();
      param_backward[p] += secs(when - prev);
      last_position[p] = static_cast<int>(k);
      prev = when;
    }
    tail_s += secs(t2 - prev);
    update_s += secs(t3 - t2);
  }

  // "Layers" of the DAG: one per parameter tensor, because that is the unit S-SGD sends (WFBP
  // one message per tensor, FUSION and MG-WFBP merge tensors): grouping a module's weight and
  // bias would halve WFBP's messages in the prediction. Ordered by when their gradient
  // completed, latest first = forward order. Unused ones (no hook) go first.
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto completed = [&](size_t i) { return last_position[i] < 0 ? 1 << 30 : last_position[i]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return completed(a) > completed(b); });
  ModelProfile prof;
  std::vector<size_t> layer_of(params.size());
  for (size_t i : order) {
    layer_of[i] = prof.layers.size();
    prof.layers.push_back({params[i].first, 0.0, param_backward[i] / iterations,
                           static_cast<double>(params[i].second.nbytes())});
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (early_with[i] == early) continue;
    prof.early_parts.push_back({layer_of[early_with[i]], layer_of[i], static_cast<double>(params[i].second.nbytes())});
  }

  // Forward per layer is not observable (no forward hooks): split the measured total in
  // proportion to backward time, which tracks a layer's arithmetic.
  const double forward_total = forward_s / iterations;
  const double backward_total = prof.backward_total();
  for (auto& l : prof.layers) {
    l.forward = backward_total > 0 ? forward_total * l.backward / backward_total
                                   : forward_total / static_cast<double>(prof.layers.size());
  }
  prof.update_seconds = (update_s + tail_s) / iterations;
  for (const auto& [name, buffer] : model.named_buffers())
    if (buffer.dtype() == core::DType::Float32) prof.buffer_bytes += static_cast<double>(buffer.nbytes());
  prof.model = config.model().name();
  prof.device = config.device().empty() ? "cpu" : config.device();
  prof.batch_size = config.data().batch_size();
  prof.iterations = iterations;
  return prof;
}

}  // namespace

// ---- The command ----

int run_model_command(const std::vector<std::string>& args, std::ostream& out) {
  std::string config_path, layer_times, save_profile, comm_profile;
  std::vector<std::string> sets;
  std::vector<int64_t> workers = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  int at = -1, profile_iters = 10, warmup_iters = 2;
  std::optional<int> servers;
  std::optional<int64_t> partition_bytes;
  double credit_bytes = 0.0;
  bool shared_cores = false;
  // Flags win over the config's dist.network, which wins over the defaults.
  std::optional<double> bandwidth, latency, inter_bandwidth, inter_latency;
  std::optional<int> ranks_per_rack;
  std::optional<std::string> allreduce;
  Flags f("model", args, kModelUsage);
  while (f.next()) {
    if (f.is("--set")) sets.push_back(f.value());
    else if (f.is("--workers")) workers = parse_int_list("--workers", f.value(), 1, 1 << 24, "a worker count");
    else if (f.is("--at")) at = f.integer(1);
    else if (f.is("--bandwidth-gbps")) bandwidth = f.number();
    else if (f.is("--latency-us")) latency = f.number();
    else if (f.is("--ranks-per-rack")) ranks_per_rack = f.integer(0);
    else if (f.is("--inter-bandwidth-gbps")) inter_bandwidth = f.number();
    else if (f.is("--inter-latency-us")) inter_latency = f.number();
    else if (f.is("--allreduce")) allreduce = f.value();
    else if (f.is("--profile-iters")) profile_iters = f.integer(1);
    else if (f.is("--warmup-iters")) warmup_iters = f.integer(0);
    else if (f.is("--layer-times")) layer_times = f.value();
    else if (f.is("--save-profile")) save_profile = f.value();
    else if (f.is("--comm-profile")) comm_profile = f.value();
    else if (f.is("--shared-cores")) shared_cores = true;
    else if (f.is("--servers")) servers = f.integer(1);
    else if (f.is("--partition-bytes")) partition_bytes = f.integer(4);
    else if (f.is("--credit-bytes")) credit_bytes = f.number();
    else if (f.is("--help") || f.is("-h")) {
      out << kModelUsage << "\n";
      return 0;
    } else if (f.arg().rfind("-", 0) == 0) {
      f.unknown();
    } else {
      if (!config_path.empty()) f.fail("more than one CONFIG (\"" + config_path + "\" and \"" + f.arg() + "\")");
      config_path = f.arg();
    }
  }
  MT_CHECK(!config_path.empty(), "model: missing CONFIG\n", kModelUsage);
  const RunConfig config = load_run_config(config_path, sets);
  const mintrain::DistConfig& dc = config.dist();

  const auto& nc = dc.network();
  const bool bandwidth_given = bandwidth || nc.has_bandwidth_gbps();
  const bool latency_given = latency || nc.has_latency_us();
  dist::NetworkSpec net;
  net.bandwidth_gbps = bandwidth.value_or(nc.bandwidth_gbps());
  net.latency_us = latency.value_or(nc.latency_us());
  net.ranks_per_rack = ranks_per_rack.value_or(nc.ranks_per_rack());
  net.inter_bandwidth_gbps = inter_bandwidth.value_or(nc.inter_bandwidth_gbps());
  net.inter_latency_us = inter_latency.value_or(nc.inter_latency_us());
  net.algorithm = dist::parse_allreduce_algorithm(allreduce.value_or(nc.allreduce()));
  if (net.ranks_per_rack > 0 && net.inter_latency_us == 0.0) net.inter_latency_us = net.latency_us;
  std::optional<MeasuredComm> measured;  // the profile with the largest n
  std::vector<MeasuredComm> all_measured;
  std::string measured_line;
  if (!comm_profile.empty()) {
    for (const std::string& file : core::split(comm_profile, ',')) {
      MT_CHECK(!file.empty(), "--comm-profile: an empty file name in \"", comm_profile,
               "\" (a comma-separated list of profile-comm files)");
      MeasuredComm m = dist::read_comm_profile(file);
      if (!shared_cores) {
        // Cores of their own for communication: the core-sharing terms stay out of the model.
        m.cost.gamma = 0.0;
        m.cost.overlap_slowdown = 0.0;
        m.cost.busy_measured_seconds.clear();
      }
      for (const MeasuredComm& other : all_measured)
        MT_CHECK(other.world != m.world, "--comm-profile: two files were measured on n = ", m.world,
                 " ranks; give one profile per n");
      all_measured.push_back(m);
      if (!measured || m.world > measured->world) measured = m;
    }
    const dist::CalibratedNetwork c = dist::calibrate_network(net, bandwidth_given, all_measured);
    net = c.spec;
    const int n = measured->world;
    std::string worlds;
    for (const MeasuredComm& m : all_measured) worlds += (worlds.empty() ? "" : ", ") + std::to_string(m.world);
    const dist::LinearCost& mc = measured->cost;
    std::string& l = measured_line;
    l = "comm profile: " + comm_profile + ", measured on n = " + worlds + " ranks" +
        (measured->group.empty() ? "" : " (" + measured->group + ")") + core::formatted(": alpha %.1f us", mc.alpha * 1e6) +
        (all_measured.size() > 1 ? " at n = " + std::to_string(n) + ", the mean over the files" : "") +
        core::formatted(" -> %.2f us per hop (replaces --latency-us); beta %.4f ms/MB -> ", c.latency_us, mc.beta * 1e9);
    if (bandwidth_given) {
      l += core::formatted("efficiency %.3f", c.efficiency);
      if (c.unclamped_efficiency > c.efficiency) l += core::formatted(" (clamped from %.3g)", c.unclamped_efficiency);
      l += core::formatted(" of the nominal ring, links at %.4g%% of their bandwidth", c.efficiency * 100);
    } else {
      l += "the measured ring's rate, one level";
    }
    l += mc.overlap_slowdown > 0
             ? core::formatted("; while a message is in flight during backward the compute loses %.1f%% (WFBP, FUSION, "
                               "MGWFBP at N >= 2; MG-WFBP's merge rule takes gamma %.1f us)",
                               mc.overlap_slowdown * 100, mc.gamma * 1e6)
             : core::formatted("; gamma %.1f us per message sent during backward (WFBP, FUSION, MGWFBP at N >= 2)",
                               mc.gamma * 1e6);
    if (!mc.measured_bytes.empty()) {
      l += "; at N = " + worlds + " an allreduce takes the measured time of its size (" +
           std::to_string(mc.measured_bytes.size()) + " sizes, interpolated";
      l += mc.idle_measured_seconds.empty()
               ? ")"
               : core::formatted("; after %.1f ms or more of idle network, the time measured after idling)",
                                 mc.idle_measured * 1e3);
      if (!mc.busy_measured_seconds.empty())
        l += "; for the share of a message that overlaps backward, the time measured while the ranks computed";
    }
  }
  const dist::NetworkModel network(net);
  if (at < 0) at = static_cast<int>(*std::max_element(workers.begin(), workers.end()));

  ModelProfile profile =
      layer_times.empty() ? profile_model(config, warmup_iters, profile_iters) : dist::read_profile(layer_times);
  const int64_t grad_values = static_cast<int64_t>(profile.gradient_bytes() / 4.0);

  AlgorithmSettings s;
  s.bucket_cap_mb = dc.ssgd().bucket_cap_mb();
  s.first_bucket_cap_mb = dc.ssgd().first_bucket_cap_mb();
  const dist::CompressionOptions co = dist::compression_options(dc.compressor());
  const auto compressor = dist::make_compressor(co);
  s.compression = compressor->name();
  s.cdsgd_summable = compressor->summable();
  s.cdsgd_payload_bytes = static_cast<double>(compressor->payload_bytes(grad_values));
  if (profile.compress_seconds < 0 || profile.decode_seconds < 0)
    measure_compression(grad_values, co, profile.compress_seconds, profile.decode_seconds);
  s.cdsgd_per_exchange.compress = profile.compress_seconds;
  s.cdsgd_per_exchange.decompress = profile.decode_seconds;
  s.cdsgd_per_exchange.full_precision_every = dc.cdsgd().k();
  s.dssync_group_size = dc.dssync().group_size();
  s.dssync_cross_period = dc.dssync().cross_period();
  s.dssync_global_average_every = dc.dssync().global_average_every();
  s.dssync_rack_aware = dc.dssync().rack_size() > 0 || dc.dssync().ranks_per_rack() > 0 || dc.dssync().measure_racks();
  if (measured) {
    s.measured_world = measured->world;
    s.measured = measured->cost;
    s.dssync_measured = measured->dssync;
    for (const MeasuredComm& m : all_measured) s.curves_at[m.world] = m.cost;
  }
  s.ps_servers = servers.value_or(dc.ps().servers() > 0 ? dc.ps().servers() : 1);
  s.partition_bytes = partition_bytes.value_or(dc.ps().partition_bytes());
  s.ps_split_tied = dc.ps().split_tied_gradients();
  s.credit_bytes = credit_bytes;
  if (!save_profile.empty()) dist::write_profile(profile, save_profile);

  // ---- Report ----
  const double t1 = profile.forward_total() + profile.backward_total() + profile.update_seconds;
  out << "mintrain model: " << (profile.model.empty() ? "?" : profile.model) << " from " << config_path
      << ", batch " << profile.batch_size << " per worker, " << profile.device << "\n";
  out << "profile: "
      << (layer_times.empty() ? core::formatted("%d iterations after %d warm-up", profile.iterations, warmup_iters)
                              : layer_times);
  out << "; forward " << ms(profile.forward_total()) << ", backward " << ms(profile.backward_total())
      << ", update " << ms(profile.update_seconds) << "; gradients " << mb(profile.gradient_bytes())
      << " in " << profile.layers.size() << " layers\n";
  out << "  layer  forward ms  backward ms        bytes  name\n";
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    const auto& L = profile.layers[l];
    out << core::formatted("  %5zu  %10.4f  %11.4f  %11.0f  %s\n", l, L.forward * 1e3, L.backward * 1e3, L.bytes,
                           L.name.c_str());
  }
  if (!measured_line.empty()) out << measured_line << "\n";
  if (measured && s.dssync_measured.group_size > 0) {
    const dist::DsSyncCommProfile& d = s.dssync_measured;
    const std::string what = "groups of " + std::to_string(d.group_size) +
                             (d.ranks_per_rack > 0 ? ", racks of " + std::to_string(d.ranks_per_rack) : std::string());
    out << "comm profile, DS-Sync: " << d.patterns.size() << " partitions timed "
        << (d.compute_seconds > 0 ? "in step after " + ms(d.compute_seconds) + " of compute each, beyond it ("
                                  : std::string("with all groups at once ("))
        << what << ")"
        << (dist::dssync_measured_at(s, s.measured_world, network.spec().ranks_per_rack)
                ? ": at N = " + std::to_string(s.measured_world) + " a group average takes their measured time"
                : ": not used, the model's DS-Sync has groups of " + std::to_string(s.dssync_group_size) +
                      (network.spec().ranks_per_rack > 0
                           ? ", racks of " + std::to_string(network.spec().ranks_per_rack)
                           : std::string(", one rack")))
        << "\n";
  }
  out << "network: " << network.describe()
      << (measured || (bandwidth_given && latency_given)
              ? ""
              : " (defaults for what --bandwidth-gbps/--latency-us did not set)")
      << "\n";
  out << "FUSION: buckets of " << s.bucket_cap_mb << " MB (first " << s.first_bucket_cap_mb
      << " MB); MGWFBP: merge plan per N from T(M) of the network\n";
  out << "CD-SGD: " << s.compression << ", " << (s.cdsgd_summable ? "allreduce" : "allgather") << " of "
      << mb(s.cdsgd_payload_bytes) << " per rank, compress " << ms(profile.compress_seconds)
      << ", decode " << ms(profile.decode_seconds) << " per payload, full precision "
      << (dc.cdsgd().k() > 0 ? "every " + std::to_string(dc.cdsgd().k()) + " iterations" : "never")
      << " (steady state, after " << dc.cdsgd().warmup_iters() << " warm-up iterations)\n";
  out << "DS-Sync: groups of " << s.dssync_group_size << ", "
      << (s.dssync_rack_aware ? "rack-aware, crossing racks every " + std::to_string(s.dssync_cross_period)
                              : std::string("butterfly over the racks"))
      << (s.dssync_global_average_every > 0
              ? ", world average every " + std::to_string(s.dssync_global_average_every)
              : std::string())
      << "; averages " << mb(profile.gradient_bytes() + profile.buffer_bytes) << "\n\n";

  out << "milliseconds per iteration (scaling efficiency t1/tN; t1 = " << ms(t1)
      << " on one worker, batch per worker fixed; CD-SGD's N = 1 includes its own compute overhead)\n";
  out << table_line("N", {"BSP", "WFBP", "FUSION", "MGWFBP", "CD-SGD", "DS-Sync"});
  auto cell = [&](const dist::Prediction& p) {
    return core::formatted("%10.3f (%3.0f%%)", p.iteration * 1e3, p.iteration > 0 ? 100.0 * t1 / p.iteration : 100.0);
  };
  std::vector<ScalingRow> rows;
  for (const int64_t n : workers) rows.push_back(dist::predict_row(profile, network, s, static_cast<int>(n)));
  for (const ScalingRow& r : rows) {
    out << table_line(std::to_string(r.workers),
                      {cell(r.bsp), cell(r.wfbp), cell(r.fusion), cell(r.mgwfbp), cell(r.cdsgd), cell(r.dssync)});
  }

  // The survey's seven methods: allreduce (A2A) and parameter server (PS).
  out << "\nthe seven methods: milliseconds per iteration (efficiency); PS: " << s.ps_servers << " server"
      << (s.ps_servers == 1 ? "" : "s") << ", partitions of at most " << mb(static_cast<double>(s.partition_bytes))
      << " (ByteScheduler's too); ByteScheduler's credit "
      << (s.credit_bytes > 0 ? mb(s.credit_bytes) : std::string("the fastest by the model (last columns)"))
      << (network.two_level() ? "; PS not modelled on two levels" : "") << "\n";
  out << table_line("N", {"BSP-A2A", "WFBP-A2A", "MG-WFBP", "BytSched-A2A", "BSP-PS", "WFBP-PS", "BytSched-PS"},
                    {"credit A", "credit P"});
  auto ps = [&](const ScalingRow& r, const dist::Prediction& p) { return r.ps_modelled ? cell(p) : std::string("-"); };
  for (const ScalingRow& r : rows) {
    out << table_line(std::to_string(r.workers),
                      {cell(r.bsp), cell(r.wfbp), cell(r.mgwfbp), cell(r.bytescheduler_a2a), ps(r, r.bsp_ps),
                       ps(r, r.wfbp_ps), ps(r, r.bytescheduler_ps)},
                      {mb(r.credit_a2a), r.ps_modelled ? mb(r.credit_ps) : std::string("-")});
  }

  // dist.algorithm "auto" starts from this order (its trials then measure the best few); the PS
  // candidates when --servers says the job starts servers (one level only, as above).
  dist::MeasuredNetwork auto_network{ring_cost(network, s, at),
                                 network.two_level() ? network.allreduce(at, dist::AllreduceAlgorithm::Hierarchical)
                                                     : dist::LinkCost{},
                                 dist::PsLinks{}};
  const int auto_servers = servers && !network.two_level() ? s.ps_servers : 0;
  if (auto_servers > 0) auto_network.servers = network.ps_links(at, auto_servers);
  mintrain::DistConfig auto_dist = dc;
  auto_dist.mutable_ps()->set_partition_bytes(s.partition_bytes);
  std::vector<dist::Candidate> ranked = dist::candidates_for(auto_dist, config.optimizer().max_grad_norm() > 0, auto_servers);
  dist::rank_candidates(ranked, profile, auto_network);
  out << "\ndist.algorithm \"auto\" at N = " << at << ", best predicted first:";
  for (const dist::Candidate& c : ranked) out << " " << c.name << " " << ms(c.predicted) << (&c == &ranked.back() ? "" : ",");
  out << "\n";

  const ScalingRow r = dist::predict_row(profile, network, s, at);
  out << "\ncritical paths at N = " << at << " (forward/backward numbers are layers, allreduce numbers messages):\n";
  const auto layers = profile.layer_costs();
  const double MiB = 1024.0 * 1024.0;
  const dist::LinearCost ring = dist::ring_cost(network, s, at);  // MG-WFBP's plan depends on all of it
  auto print = [&](const std::string& name, const dist::Prediction& p, const std::string& extra) {
    out << "  " << name << " " << ms(p.iteration) << extra << ": " << compact_path(p.critical_path) << "\n";
  };
  print("BSP", r.bsp, "");
  print("WFBP", r.wfbp, "");
  print("FUSION", r.fusion,
        ", plan " + dist::plan_str(dist::plan_for(dist::Schedule::FUSION, layers, ring,
                                                  s.bucket_cap_mb * MiB, s.first_bucket_cap_mb * MiB)));
  print("MGWFBP", r.mgwfbp,
        ", plan " + dist::plan_str(dist::plan_for(dist::Schedule::MGWFBP, layers, ring, 0, 0)));
  print("CD-SGD", r.cdsgd, " (mean over the k-step cycle; compressed period shown)");
  print("DS-Sync", r.dssync, "");
  out << "  (below: the DAG runs from backward to the next iteration's forward; push/pull k and allreduce k are partitions)\n";
  print("ByteScheduler-A2A", r.bytescheduler_a2a, ", credit " + mb(r.credit_a2a));
  if (r.ps_modelled) {
    print("BSP-PS", r.bsp_ps, "");
    print("WFBP-PS", r.wfbp_ps, "");
    print("ByteScheduler-PS", r.bytescheduler_ps, ", credit " + mb(r.credit_ps));
  }
  return 0;
}

}  // namespace mt::apps
