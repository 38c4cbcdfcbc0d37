// Learning-rate schedules: the learning rate as a function of the (fractional) epoch, so the
// trainer can set it every iteration and a resumed run gets exactly the same value.
//
//   constant    base_lr
//   step        base_lr * gamma ^ floor(epoch / step_epochs)
//   multistep   base_lr * gamma ^ (number of milestones <= epoch)
//   cosine      min_lr + (base_lr - min_lr) * (1 + cos(pi * epoch / total_epochs)) / 2,
//               and min_lr after total_epochs
//   linear      base_lr until warmup_epochs, then straight down to min_lr at total_epochs:
//               base_lr + (min_lr - base_lr) * (epoch - warmup) / (total_epochs - warmup),
//               and min_lr after total_epochs. With warm-up this is BERT's schedule: up to
//               the peak over the warm-up, then down from it; unlike cosine, the decay starts
//               where the warm-up ends, so the peak is actually reached.
//
// Linear warm-up multiplies any of them during the first warmup_epochs by a factor that ramps
// from warmup_start_factor to 1; large-batch training needs it because the first steps, taken
// from random weights with a large learning rate, can otherwise diverge (Goyal et al. 2017).
#pragma once
#include <string>
#include <vector>

namespace mt::optim {

struct LrScheduleOptions {
  std::string type = "constant";  // constant|step|multistep|cosine|linear
  double base_lr = 0.1;
  double gamma = 0.1;
  double step_epochs = 30;
  std::vector<double> milestones;
  double total_epochs = 1;  // cosine, linear
  double min_lr = 0.0;  // cosine, linear
  double warmup_epochs = 0.0;
  double warmup_start_factor = 0.1;
};

class LrSchedule {
 public:
  // Throws Error naming the field for an unknown type, unsorted milestones or negative values.
  explicit LrSchedule(LrScheduleOptions opt);
  // epoch is fractional: iteration / iterations_per_epoch.
  double lr_at(double epoch) const;
  const LrScheduleOptions& options() const { return opt_; }

 private:
  double scheduled(double epoch) const;  // before warm-up
  LrScheduleOptions opt_;
};

std::vector<std::string> lr_schedule_types();

}  // namespace mt::optim
