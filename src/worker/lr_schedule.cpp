#include "worker/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace gradbox::worker {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (step >= max_steps) return min_lr;
  const double progress = static_cast<double>(step - warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, max_steps - warmup_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr + cosine * (max_lr - min_lr);
}

}  // namespace gradbox::worker
