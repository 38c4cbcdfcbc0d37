#include "dist/auto/candidates.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "dist/bytescheduler/bytescheduler_synchronizer.h"
#include "dist/predict/cost_model.h"
#include "dist/predict/partition_cost_model.h"

namespace mt::dist {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

Candidate ssgd(const mintrain::DistConfig& base, const std::string& schedule, bool hierarchical) {
  Candidate c{(hierarchical ? "hierarchical/" : "ssgd/") + schedule, base};
  c.dist.set_algorithm("ssgd");
  c.dist.mutable_ssgd()->set_schedule(schedule);
  c.dist.mutable_ssgd()->set_allreduce(hierarchical ? "hierarchical" : "flat");
  // MG-WFBP profiles its own backward for profile_iters iterations (as BSP) before its plan.
  if (schedule == "mgwfbp") c.warmup_iters += base.ssgd().profile_iters() + 2;
  return c;
}

// Algorithms that train differently from S-SGD: each rank's own weights, a delayed or lossy
// average. auto switches only between candidates that train alike.
bool lossy(const std::string& name) {
  for (const char* a : {"cdsgd", "dssync", "local_sgd", "dlcp"})
    if (name == a || name.rfind(std::string(a) + "/", 0) == 0) return true;
  return false;
}

void by_prediction(std::vector<Candidate>& candidates) {  // fastest first, equals in list order
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.predicted < b.predicted; });
}

}  // namespace

std::vector<std::string> candidate_names() {
  return {"ssgd/bsp", "ssgd/wfbp", "ssgd/fusion", "ssgd/mgwfbp", "hierarchical/fusion", "hierarchical/mgwfbp",
          "bytescheduler/a2a", "bytescheduler/ps", "ps/bsp", "ps/wfbp", "ps/staggered"};
}

std::vector<Candidate> candidates_for(const mintrain::DistConfig& dist, bool clips_gradients, int servers) {
  mintrain::DistConfig base = dist;
  base.clear_auto_();
  base.mutable_compressor()->set_type("none");
  base.mutable_ssgd()->set_hook("allreduce");
  std::vector<Candidate> all;
  for (const char* s : {"bsp", "wfbp", "fusion", "mgwfbp"}) all.push_back(ssgd(base, s, false));
  if (!dist.ssgd().rack().empty() || dist.ssgd().ranks_per_rack() > 0)
    for (const char* s : {"fusion", "mgwfbp"}) all.push_back(ssgd(base, s, true));
  for (const std::string architecture : {"a2a", "ps"}) {
    const bool on_servers = architecture == "ps";
    if (clips_gradients || (on_servers && servers == 0)) continue;
    Candidate bs{"bytescheduler/" + architecture, base};
    bs.dist.set_algorithm("bytescheduler");
    bs.dist.mutable_bytescheduler()->set_architecture(architecture);
    if (on_servers) bs.served_partition_bytes = partition_bytes_of(bs.dist.bytescheduler());
    all.push_back(bs);
  }
  for (const char* s : {"bsp", "wfbp", "staggered"}) {
    if (servers == 0) break;
    Candidate ps{std::string("ps/") + s, base};
    ps.dist.set_algorithm("ps");
    ps.dist.mutable_ps()->set_schedule(s);
    ps.served_partition_bytes = ps.dist.ps().partition_bytes();
    all.push_back(ps);
  }

  const auto& named = dist.auto_().candidates();
  if (named.empty()) return all;
  std::vector<Candidate> kept;
  for (const std::string& name : named) {
    MT_CHECK(!lossy(name), "dist.auto.candidates: \"", name, "\" trains differently from S-SGD (each rank's own "
             "weights, or a delayed or lossy average), and auto switches only between synchronizations that train "
             "alike; run it with dist.algorithm \"", name.substr(0, name.find('/')), "\"");
    const auto it = std::find_if(all.begin(), all.end(), [&](const Candidate& c) { return c.name == name; });
    MT_CHECK(it != all.end(), "dist.auto.candidates: \"", name, "\" is not a candidate of this job; valid names: ",
             core::join(candidate_names()), " (hierarchical/ ones need dist.ssgd.rack or ranks_per_rack; "
             "bytescheduler/ ones need optimizer.max_grad_norm 0, ps/ ones and bytescheduler/ps parameter servers: "
             "`mintrain launch --nservers S`)");
    kept.push_back(*it);
  }
  return kept;
}

void rank_candidates(std::vector<Candidate>& candidates, const ModelProfile& profile, const MeasuredNetwork& network) {
  const std::vector<LayerCost> layers = profile.layer_costs();
  for (Candidate& c : candidates) {
    const bool hierarchical = c.name.rfind("hierarchical/", 0) == 0;
    const LinearCost cost(hierarchical ? network.hierarchical : network.flat);
    if (c.dist.algorithm() == "bytescheduler") {
      const bool ps = c.dist.bytescheduler().architecture() == "ps";
      const CreditChoice choice = best_credit(layers, profile.update_seconds,
                                              ps ? Architecture::ParameterServer : Architecture::AllReduce,
                                              partition_bytes_of(c.dist.bytescheduler()), cost,
                                              ps ? network.servers : PsLinks{});
      c.predicted = choice.prediction.iteration;
      c.dist.mutable_bytescheduler()->set_credit_bytes(static_cast<int64_t>(choice.credit_bytes));
      continue;
    }
    if (c.dist.algorithm() == "ps") {  // the staggered schedule's rounds are priced as WFBP's pushes
      const int64_t bytes = c.dist.ps().partition_bytes();
      c.predicted = predict_partitioned(layers, profile.update_seconds,
                                        c.dist.ps().schedule() == "bsp" ? bsp_ps(bytes) : wfbp_ps(bytes), cost,
                                        network.servers)
                        .iteration;
      continue;
    }
    mintrain::SsgdConfig& s = *c.dist.mutable_ssgd();
    c.predicted = predict_schedule(parse_schedule(s.schedule()), layers, cost, profile.update_seconds,
                                   s.bucket_cap_mb() * kMiB, s.first_bucket_cap_mb() * kMiB)
                      .iteration;
    if (s.schedule() == "mgwfbp" && !s.has_alpha()) {
      s.set_alpha(cost.alpha);
      s.set_beta(cost.beta);
    }
  }
  by_prediction(candidates);
}

size_t with_incumbent(std::vector<Candidate>& ranked, size_t tries, const std::string& incumbent) {
  const auto first = ranked.begin() + static_cast<std::ptrdiff_t>(tries);
  const auto it = std::find_if(first, ranked.end(), [&](const Candidate& c) { return c.name == incumbent; });
  if (it == ranked.end()) return tries;
  std::rotate(first, it, it + 1);
  return tries + 1;
}

void calibrate(std::vector<Candidate>& ranked, const std::map<std::string, double>& misfit) {
  const auto family = [](const std::string& name) { return name.substr(0, name.find('/')); };
  std::map<std::string, double> least;
  for (const auto& [name, ratio] : misfit)
    if (!least.count(family(name)) || ratio < least[family(name)]) least[family(name)] = ratio;
  for (Candidate& c : ranked) {
    const auto own = misfit.find(c.name);
    const auto of_family = least.find(family(c.name));
    c.predicted *= own != misfit.end() ? own->second : of_family != least.end() ? of_family->second : 1.0;
  }
  by_prediction(ranked);
}

size_t with_every_family(std::vector<Candidate>& ranked, size_t tries) {
  const auto at = [&](size_t k) { return ranked.begin() + static_cast<std::ptrdiff_t>(k); };
  for (size_t i = tries; i < ranked.size(); ++i) {
    const std::string family = ranked[i].dist.algorithm();  // "ssgd", "bytescheduler", "ps"
    if (std::none_of(at(0), at(tries), [&](const Candidate& c) { return c.dist.algorithm() == family; }))
      std::rotate(at(tries++), at(i), at(i + 1));
  }
  return tries;
}

}  // namespace mt::dist
