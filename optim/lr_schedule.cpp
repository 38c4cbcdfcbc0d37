#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/strings.h"

namespace mt::optim {

std::vector<std::string> lr_schedule_types() {
  return {"constant", "step", "multistep", "cosine", "linear"};
}

LrSchedule::LrSchedule(LrScheduleOptions opt) : opt_(std::move(opt)) {
  const auto types = lr_schedule_types();
  MT_CHECK(std::find(types.begin(), types.end(), opt_.type) != types.end(), "lr schedule: unknown type '",
           opt_.type, "'; valid types: ", core::join(types));
  MT_CHECK(opt_.base_lr >= 0, "lr schedule: base_lr must be >= 0, got ", opt_.base_lr);
  MT_CHECK(opt_.gamma > 0, "lr schedule: gamma must be > 0, got ", opt_.gamma);
  MT_CHECK(opt_.warmup_epochs >= 0, "lr schedule: warmup_epochs must be >= 0, got ", opt_.warmup_epochs);
  MT_CHECK(opt_.warmup_start_factor >= 0 && opt_.warmup_start_factor <= 1,
           "lr schedule: warmup_start_factor must be in [0, 1], got ", opt_.warmup_start_factor);
  if (opt_.type == "step")
    MT_CHECK(opt_.step_epochs > 0, "lr schedule: step_epochs must be > 0 for type 'step', got ",
             opt_.step_epochs);
  if (opt_.type == "multistep") {
    for (size_t i = 0; i < opt_.milestones.size(); ++i) {
      MT_CHECK(opt_.milestones[i] >= 0, "lr schedule: milestones must be >= 0, got ",
               opt_.milestones[i], " at position ", i);
      MT_CHECK(i == 0 || opt_.milestones[i] > opt_.milestones[i - 1],
               "lr schedule: milestones must be strictly increasing, got ", opt_.milestones[i - 1],
               " then ", opt_.milestones[i]);
    }
  }
  if (opt_.type == "cosine" || opt_.type == "linear") {
    MT_CHECK(opt_.total_epochs > 0, "lr schedule: total_epochs must be > 0 for type '", opt_.type,
             "', got ", opt_.total_epochs);
    MT_CHECK(opt_.min_lr >= 0 && opt_.min_lr <= opt_.base_lr,
             "lr schedule: min_lr must be in [0, base_lr = ", opt_.base_lr, "], got ", opt_.min_lr);
  }
  if (opt_.type == "linear")
    MT_CHECK(opt_.warmup_epochs < opt_.total_epochs, "lr schedule: type 'linear' decays from the end "
             "of the warm-up to total_epochs, so warmup_epochs (", opt_.warmup_epochs,
             ") must be < total_epochs (", opt_.total_epochs, ")");
}

double LrSchedule::scheduled(double epoch) const {
  const double base = opt_.base_lr;
  if (opt_.type == "step") return base * std::pow(opt_.gamma, std::floor(epoch / opt_.step_epochs));
  if (opt_.type == "multistep") {
    // A milestone m means "decay from epoch m on", so m itself already has the lower value.
    const auto passed = std::upper_bound(opt_.milestones.begin(), opt_.milestones.end(), epoch) -
                        opt_.milestones.begin();
    return base * std::pow(opt_.gamma, static_cast<double>(passed));
  }
  if (opt_.type == "cosine") {
    const double t = std::min(epoch, opt_.total_epochs) / opt_.total_epochs;
    return opt_.min_lr + (base - opt_.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  }
  if (opt_.type == "linear") {
    const double w = opt_.warmup_epochs;
    const double t = std::clamp((epoch - w) / (opt_.total_epochs - w), 0.0, 1.0);
    return (1.0 - t) * base + t * opt_.min_lr;  // exactly base_lr and min_lr at the ends
  }
  return base;  // constant
}

double LrSchedule::lr_at(double epoch) const {
  MT_CHECK(epoch >= 0 && std::isfinite(epoch), "lr schedule: epoch must be finite and >= 0, got ", epoch);
  const double lr = scheduled(epoch);
  if (epoch >= opt_.warmup_epochs) return lr;
  const double frac = epoch / opt_.warmup_epochs;
  return lr * (opt_.warmup_start_factor + (1.0 - opt_.warmup_start_factor) * frac);
}

}  // namespace mt::optim
