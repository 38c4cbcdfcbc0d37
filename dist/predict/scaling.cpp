#include "dist/predict/scaling.h"

#include <algorithm>

#include "core/error.h"
#include "dist/predict/partition_cost_model.h"

namespace mt::dist {

CalibratedNetwork calibrate_network(const NetworkSpec& nominal, bool bandwidth_given,
                                    const std::vector<MeasuredComm>& profiles) {
  MT_CHECK(!profiles.empty(), "calibrate_network: no communication profile given");
  CalibratedNetwork c;
  c.spec = nominal;
  double latency_us = 0.0, efficiency = 0.0, rate_gbps = 0.0;
  for (const MeasuredComm& measured : profiles) {
    const int n = measured.world;
    MT_CHECK(n >= 2 && measured.cost.beta > 0, "calibrate_network: the profile needs world >= 2 and beta > 0");
    // A ring allreduce on n ranks takes 2(n-1) steps; each pays one hop's start-up.
    latency_us += measured.cost.alpha / (2.0 * (n - 1)) * 1e6;
    if (bandwidth_given) {
      // Gloo measured a ring, so the nominal side is the ring too, whatever --allreduce says.
      efficiency += NetworkModel(nominal).allreduce(n, AllreduceAlgorithm::Ring).beta / measured.cost.beta;
    } else {
      rate_gbps += 2.0 * (n - 1) / n / measured.cost.beta * 8.0 / 1e9;
    }
  }
  const double count = static_cast<double>(profiles.size());
  c.latency_us = latency_us / count;
  c.spec.latency_us = c.latency_us;
  c.spec.inter_latency_us = c.latency_us;
  if (bandwidth_given) {
    // Above 1.5 the measurement contradicts the nominal spec (e.g. loopback measured, a slow
    // network named): trusting it further would predict links faster than they are said to be.
    c.unclamped_efficiency = efficiency / count;
    c.efficiency = std::min(c.unclamped_efficiency, 1.5);
    c.spec.bandwidth_gbps *= c.efficiency;
    if (c.spec.ranks_per_rack > 0) c.spec.inter_bandwidth_gbps *= c.efficiency;
  } else {
    MT_CHECK(nominal.ranks_per_rack == 0, "--comm-profile without --bandwidth-gbps describes one level (the "
             "measured ring's rate); for racks (--ranks-per-rack ", nominal.ranks_per_rack,
             ") also give --bandwidth-gbps and --inter-bandwidth-gbps, which the profile then scales");
    c.spec.bandwidth_gbps = rate_gbps / count;
    c.spec.inter_bandwidth_gbps = 0.0;
    c.spec.inter_latency_us = 0.0;
  }
  return c;
}

LinearCost ring_cost(const NetworkModel& network, const AlgorithmSettings& s, int n) {
  LinearCost ring = network.allreduce(n);
  if (n > 1) {
    ring.gamma = s.measured.gamma;
    ring.overlap_slowdown = s.measured.overlap_slowdown;
  }
  if (n > 1 && !ring.in_levels()) {
    if (const auto at = s.curves_at.find(n); at != s.curves_at.end()) {
      copy_curves(at->second, ring);
    } else if (n == s.measured_world) {
      copy_curves(s.measured, ring);
    }
  }
  return ring;
}

bool dssync_measured_at(const AlgorithmSettings& s, int n, int ranks_per_rack) {
  const DsSyncCommProfile& m = s.dssync_measured;
  const int rack = ranks_per_rack > 0 && ranks_per_rack < n ? ranks_per_rack : 0;
  return m.group_size > 0 && n == s.measured_world && m.group_size == std::min(s.dssync_group_size, n) &&
         m.ranks_per_rack == rack;
}

ScalingRow predict_row(const ModelProfile& profile, const NetworkModel& network, const AlgorithmSettings& s, int n) {
  MT_CHECK(n >= 1, "worker count must be >= 1, got ", n);
  const std::vector<LayerCost> layers = profile.layer_costs();
  const double u = profile.update_seconds;
  const double MiB = 1024.0 * 1024.0;
  const LinearCost ring = ring_cost(network, s, n);
  ScalingRow row;
  row.workers = n;
  auto ssgd = [&](Schedule schedule) {
    return predict_schedule(schedule, layers, ring, u, s.bucket_cap_mb * MiB, s.first_bucket_cap_mb * MiB);
  };
  row.bsp = ssgd(Schedule::BSP);
  row.wfbp = ssgd(Schedule::WFBP);
  row.fusion = ssgd(Schedule::FUSION);
  row.mgwfbp = ssgd(Schedule::MGWFBP);

  // ByteScheduler on the ring, and the parameter server (one level only), from the same network.
  const PsLinks links = network.two_level() ? PsLinks{} : network.ps_links(n, std::max(1, s.ps_servers));
  auto by_credit = [&](Architecture architecture, double& credit) {
    if (s.credit_bytes > 0) {
      credit = s.credit_bytes;
      return predict_partitioned(layers, u, bytescheduler(architecture, s.partition_bytes, credit), ring, links);
    }
    const CreditChoice choice = best_credit(layers, u, architecture, s.partition_bytes, ring, links);
    credit = choice.credit_bytes;
    return choice.prediction;
  };
  row.bytescheduler_a2a = by_credit(Architecture::AllReduce, row.credit_a2a);
  row.ps_modelled = !network.two_level();
  if (row.ps_modelled) {
    row.bsp_ps = predict_partitioned(layers, u, bsp_ps(s.partition_bytes), ring, links);
    // WFBP-PS (and staggered, which it predicts) with the split sends tied parameters' early parts early.
    const std::vector<LayerCost> wfbp_layers = s.ps_split_tied ? profile.layer_costs_split() : layers;
    row.wfbp_ps = predict_partitioned(wfbp_layers, u, wfbp_ps(s.partition_bytes), ring, links);
    row.bytescheduler_ps = by_credit(Architecture::ParameterServer, row.credit_ps);
  }

  // CD-SGD: one flat exchange of the whole gradient per iteration.
  CdsgdCost c = s.cdsgd_per_exchange;
  const double grad_bytes = profile.gradient_bytes();
  if (n == 1) {
    c.exchange = c.full_exchange = 0.0;
  } else {
    c.exchange = s.cdsgd_summable ? ring.time(s.cdsgd_payload_bytes)
                                  : network.allgather(n).time(s.cdsgd_payload_bytes);
    c.full_exchange = ring.time(grad_bytes);
  }
  // Allgathered payloads: every rank decodes all n; summed ones: one decode of the sum.
  c.decompress = s.cdsgd_per_exchange.decompress * (s.cdsgd_summable ? 1 : n);
  row.cdsgd = predict_cdsgd(layers, u, c);

  // DS-Sync: group allreduce of parameters and float32 buffers.
  DssyncCost d;
  const double model_bytes = grad_bytes + profile.buffer_bytes;
  const int g = std::min(s.dssync_group_size, n);
  const int rack = network.spec().ranks_per_rack;
  LinearCost in_rack = network.group_allreduce(g, false);
  // In a crossing phase every rank of a rack is in a crossing group: rack-many rings share the uplink.
  LinearCost cross_rack = network.group_allreduce(g, true, std::max(1, std::min(rack, n)));
  if (dssync_measured_at(s, n, rack)) {
    // Timed on this network as DS-Sync runs them: all groups at once (the lines stay the slope
    // above the largest size measured).
    std::vector<double> bytes, seconds;
    if (dssync_pattern_curve(s.dssync_measured, false, bytes, seconds))
      set_measured_curve(in_rack, bytes, seconds);
    if (dssync_pattern_curve(s.dssync_measured, true, bytes, seconds))
      set_measured_curve(cross_rack, bytes, seconds);
  }
  d.in_rack = in_rack.time(model_bytes);
  d.cross_rack = cross_rack.time(model_bytes);
  d.world = ring.time(model_bytes);
  d.world_every = s.dssync_global_average_every;
  d.cross_fraction = n == 1 ? 0.0
                            : dssync_cross_fraction(n, std::max(2, s.dssync_group_size), rack, s.dssync_rack_aware,
                                                    s.dssync_cross_period);
  if (n == 1) d = {};
  row.dssync = predict_dssync(layers, u, d);
  return row;
}

}  // namespace mt::dist
