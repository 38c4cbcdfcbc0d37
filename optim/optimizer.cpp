#include "optim/optimizer.h"

namespace mt::optim {

// Dropping the gradient (rather than filling it with zeros) lets the next backward allocate a
// fresh one and skip a memset; step() treats a parameter without a gradient as "no update".
void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

}  // namespace mt::optim
