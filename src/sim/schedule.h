#pragma once
// Note [Random schedules]
// FoundationDB-style testing of the folder protocol: one seed is one whole run of many
// simulated workers (sim_worker.h) running the real exchange on the simulated folder, under a
// random schedule of faults drawn from that seed: kill -9s with restarts, pauses (hung
// sessions), outages in which some workers cannot see the folder at all (partitions), and the
// folder's own lag, lost listings and partial copies. After the run, the invariants:
//   - replicas agree: every round's applied parameters are identical across the workers that
//     applied it, except in divergence episodes (a partition healing) that end, with every
//     minority replica repaired, within max_divergent_rounds;
//   - progress: every worker finishes the run before the horizon;
//   - nothing waits past its deadline and nothing bad is read: no process ends with an error
//     (a give-up, an internal check), and no exchange rejected a file (the simulated folder
//     holds only genuine files; a rejection means a partial or stale one was read);
//   - and the final parameters of all workers are identical.
// The same seed replays the same run exactly. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace gradbox::sim {

struct ScheduleOptions {
  uint64_t seed = 1;
  int workers = 8;
  uint64_t rounds = 60;
  bool sharded = false;          // else all-gather; the seed picks when `pick_pattern`
  bool pick_pattern = true;
  double fault_every_s = 6;      // mean virtual seconds between injected faults
  uint64_t max_divergent_rounds = 12;
  double horizon_s = 4000;       // virtual seconds before "no progress"
  int inner_steps = 1;           // > 1: DiLoCo rounds of that many steps (sim_worker.h)
  // With DiLoCo: overlapped time-boxed rounds (boxes of about half the inner steps of a
  // worker's compute, H - 1 steps overlapped) with a partial Δ every other inner step (Note
  // [Overlapped time-boxed rounds], Note [Partial deltas] in exchange/folder_exchange.h).
  bool boxed = false;
  // With boxed: the eager rule for the rounds applied late (Note [Eager outer steps] in
  // worker/eager_outer.h); every worker's offset must stay finite and end settled to zero.
  bool eager = false;
};

struct ScheduleReport {
  uint64_t seed = 0;
  bool ok = true;
  std::string failure;           // the first broken invariant, with the seed to replay it
  int kills = 0, pauses = 0, outages = 0, partitions = 0;  // partitions: outages of several workers at once
  uint64_t divergent_rounds = 0, repairs = 0, self_elections = 0, failovers = 0, blind_waits = 0;
  uint64_t partials_salvaged = 0;  // partial deltas owners pinned (boxed schedules)
  uint64_t eager_steps = 0;        // Δs sent with an eager offset step (eager schedules)
  double virtual_seconds = 0;
  std::string pattern;
};

ScheduleReport run_schedule(const ScheduleOptions& options);
std::string describe(const ScheduleReport& report);

}  // namespace gradbox::sim
