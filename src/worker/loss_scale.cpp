#include "worker/loss_scale.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace gradbox::worker {

void LossScaler::overflowed() {
  if (!dynamic_) return;
  scale_ = std::max(kMin, scale_ / 2);
  good_steps_ = 0;
}

void LossScaler::applied() {
  if (!dynamic_) return;
  if (++good_steps_ % kGrowthInterval == 0) scale_ = std::min(kMax, scale_ * 2);
}

void LossScaler::restore(double scale, int64_t good_steps) {
  GB_REQUIRE(std::isfinite(scale) && scale >= kMin && scale <= kMax && good_steps >= 0, "checkpoint: loss scale ", scale,
             " or good steps ", good_steps, " out of range");
  if (!dynamic_) return;  // another precision: its own scale
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace gradbox::worker
