#pragma once
// Linear warmup, then cosine decay to min_lr at max_steps (nanoGPT's schedule).
#include <cstdint>

namespace gradbox::worker {

struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 100;
  int64_t max_steps = 1000;

  // step is 0-based: the learning rate used by optimizer step `step`.
  double at(int64_t step) const;
};

}  // namespace gradbox::worker
