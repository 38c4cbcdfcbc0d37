#include "dist/ssgd/merge_plan.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace mt::dist {

std::vector<std::string> schedule_names() { return {"bsp", "wfbp", "fusion", "mgwfbp"}; }

Schedule parse_schedule(const std::string& name) {
  if (name == "bsp") return Schedule::BSP;
  if (name == "wfbp") return Schedule::WFBP;
  if (name == "fusion") return Schedule::FUSION;
  if (name == "mgwfbp") return Schedule::MGWFBP;
  MT_FAIL("unknown S-SGD schedule \"", name,
          "\" (dist.ssgd.schedule); valid: \"bsp\", \"wfbp\", \"fusion\", \"mgwfbp\"");
}

std::string schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::BSP: return "bsp";
    case Schedule::WFBP: return "wfbp";
    case Schedule::FUSION: return "fusion";
    case Schedule::MGWFBP: return "mgwfbp";
  }
  return "?";
}

MergePlan wfbp_plan(int layers) {
  MergePlan plan;
  for (int l = layers - 1; l >= 0; --l) plan.push_back({l});
  return plan;
}

MergePlan bsp_plan(int layers) {
  MergePlan plan(1);
  for (int l = layers - 1; l >= 0; --l) plan[0].push_back(l);
  return plan;
}

MergePlan fusion_plan(const std::vector<double>& bytes, double cap_bytes, double first_cap_bytes) {
  MergePlan plan;
  double filled = 0.0;
  for (int l = static_cast<int>(bytes.size()) - 1; l >= 0; --l) {
    // The first message is small so that communication starts early in backward.
    const double cap = plan.size() == 1 ? first_cap_bytes : cap_bytes;
    if (plan.empty() || filled + bytes[l] > cap) {
      plan.push_back({});
      filled = 0.0;
    }
    plan.back().push_back(l);
    filled += bytes[l];
  }
  return plan;
}

MergePlan mgwfbp_plan(const std::vector<double>& tb, const std::vector<double>& bytes,
                      const LinkCost& cost) {
  const int L = static_cast<int>(tb.size());
  MT_CHECK(bytes.size() == tb.size(), "mgwfbp_plan: ", tb.size(), " backward times but ",
           bytes.size(), " sizes");
  if (L == 0) return {};
  std::vector<double> p = bytes, tc(L), tau_b(L), tau_c(L);
  std::vector<std::vector<int>> members(L);  // the layers whose gradients travel with layer l
  for (int l = 0; l < L; ++l) {
    tc[l] = cost.time(p[l]);
    members[l] = {l};
  }
  // Backward starts with layer L-1 at time 0; tau_b[l] = when layer l's backward starts: after
  // layer l+1's backward and, when a message leaves with l+1's gradient, that message's gamma.
  // tau_c[l] = when the message that layer l completes can start on the link.
  auto recompute = [&] {
    tau_b[L - 1] = 0.0;
    for (int l = L - 2; l >= 0; --l)
      tau_b[l] = tau_b[l + 1] + tb[l + 1] + (members[l + 1].empty() ? 0.0 : cost.gamma);
    tau_c[L - 1] = tau_b[L - 1] + tb[L - 1];
    for (int l = L - 2; l >= 0; --l) tau_c[l] = std::max(tau_c[l + 1] + tc[l + 1], tau_b[l] + tb[l]);
  };
  recompute();
  // Merge l into l-1: one message instead of two saves l's start-up cost alpha (and gamma).
  auto merge = [&](int l) {
    p[l - 1] += p[l];
    p[l] = 0.0;
    tc[l] = 0.0;
    tc[l - 1] = cost.time(p[l - 1]);
    members[l].insert(members[l].end(), members[l - 1].begin(), members[l - 1].end());
    members[l - 1] = std::move(members[l]);
    members[l].clear();
    recompute();
  };
  auto comm_end = [&] { return tau_c[0] + tc[0]; };  // layer 0 always closes the last message
  for (int l = L - 1; l >= 1; --l) {
    const double next_ready = tau_b[l - 1] + tb[l - 1];  // when l-1's gradient is final
    const bool cannot_finish = tau_c[l] + tc[l] > next_ready;
    const bool not_started = tau_c[l] >= next_ready;                                // (a)
    const bool started_recently = next_ready - tau_c[l] < cost.alpha + cost.gamma;  // (b)
    if (cannot_finish && (not_started || started_recently)) {
      merge(l);
    } else if (cost.gamma > 0) {
      // The paper's rule looks at one pair, but with gamma a merge also brings every later
      // gradient forward by gamma: merge too when the last message is then not predicted to
      // end later (ties merge: fewer messages take less CPU than the model can see).
      const double before = comm_end();
      const auto saved = std::make_tuple(p, tc, members, tau_b, tau_c);
      merge(l);
      if (comm_end() > before) std::tie(p, tc, members, tau_b, tau_c) = saved;
    }
  }
  MergePlan plan;
  for (int l = L - 1; l >= 0; --l)
    if (!members[l].empty()) plan.push_back(members[l]);
  return plan;
}

double plan_comm_end(const std::vector<double>& tb, const std::vector<double>& bytes, const MergePlan& plan,
                     const LinkCost& cost) {
  const int L = static_cast<int>(tb.size());
  // The message each layer's gradient completes (-1: none).
  std::vector<int> completes(L, -1);
  for (size_t m = 0; m < plan.size(); ++m)
    if (!plan[m].empty()) completes.at(plan[m].back()) = static_cast<int>(m);
  std::vector<double> ready(plan.size(), 0.0);
  double t = 0.0;  // the backward chain
  for (int l = L - 1; l >= 0; --l) {
    t += tb[l];
    if (completes[l] < 0) continue;
    ready[completes[l]] = t;
    if (l > 0) t += cost.gamma;  // sent while backward goes on: its CPU work delays backward
  }
  double link_free = 0.0;
  for (size_t m = 0; m < plan.size(); ++m) {
    double message_bytes = 0.0;
    for (int l : plan[m]) message_bytes += bytes[l];
    link_free = std::max(link_free, ready[m]) + cost.time(message_bytes);
  }
  return std::max(link_free, t);
}

MergePlan mgwfbp_best_plan(const std::vector<double>& tb, const std::vector<double>& bytes, const LinkCost& cost) {
  MergePlan best = mgwfbp_plan(tb, bytes, cost);
  const int L = static_cast<int>(tb.size());
  if (L <= 1) return best;
  double total = 0.0, smallest = 0.0;
  for (double b : bytes) {
    total += b;
    if (b > 0 && (smallest == 0.0 || b < smallest)) smallest = b;
  }
  const double greedy = plan_comm_end(tb, bytes, best, cost);
  double best_end = greedy;
  std::vector<MergePlan> candidates = {wfbp_plan(L), bsp_plan(L)};
  for (double cap = std::max(smallest, 1.0); cap < total; cap *= 2) candidates.push_back(fusion_plan(bytes, cap, cap));
  for (const MergePlan& c : candidates) {
    const double end = plan_comm_end(tb, bytes, c, cost);
    // Clearly better only: within kPlanMargin the paper's plan stays (the difference is below
    // what the profile can tell apart).
    if (end < greedy * (1.0 - kPlanMargin) && end < best_end) {
      best = c;
      best_end = end;
    }
  }
  return best;
}

std::string plan_str(const MergePlan& plan) {
  std::ostringstream os;
  for (size_t m = 0; m < plan.size(); ++m) {
    os << (m ? " [" : "[");
    for (size_t i = 0; i < plan[m].size(); ++i) os << (i ? " " : "") << plan[m][i];
    os << "]";
  }
  return os.str();
}

}  // namespace mt::dist
