// Note [Random schedules] (sim/schedule.h) in CI: a few hundred seeds, each a whole run of
// eight simulated workers under random kills, pauses, outages and partitions, the real protocol
// code in virtual time. GRADBOX_SCHEDULES=N runs N per part instead; scripts/schedules.sh runs
// thousands. Split in parts so that ctest runs them side by side.
#include <gtest/gtest.h>

#include <cstdlib>

#include "sim/schedule.h"

namespace gradbox::sim {
namespace {

void run_seeds(uint64_t first, uint64_t count) {
  if (const char* env = std::getenv("GRADBOX_SCHEDULES")) count = static_cast<uint64_t>(std::atoll(env));
  for (uint64_t seed = first; seed < first + count; ++seed) {
    ScheduleOptions options;
    options.seed = seed;
    const ScheduleReport report = run_schedule(options);
    EXPECT_TRUE(report.ok) << describe(report);
  }
}

TEST(RandomSchedules, Seeds1001To1080) { run_seeds(1001, 80); }
TEST(RandomSchedules, Seeds1081To1160) { run_seeds(1081, 80); }
TEST(RandomSchedules, Seeds1161To1240) { run_seeds(1161, 80); }

// DiLoCo rounds (four inner steps each, so rounds last four times as long and heartbeats come
// from between the rounds) under the same faults and invariants.
TEST(RandomSchedules, DilocoSeeds3001To3040) {
  const uint64_t count = std::getenv("GRADBOX_SCHEDULES") ? std::atoll(std::getenv("GRADBOX_SCHEDULES")) : 40;
  for (uint64_t seed = 3001; seed < 3001 + count; ++seed) {
    ScheduleOptions options;
    options.seed = seed;
    options.inner_steps = 4;
    options.rounds = 30;
    const ScheduleReport report = run_schedule(options);
    EXPECT_TRUE(report.ok) << describe(report);
  }
}

// Overlapped time-boxed DiLoCo rounds with partial deltas (the mode of the README's headline):
// boxes close together, late entrants and members left out re-enter, and an owner pins a dead
// or late member's partial delta; the same invariants hold. Odd seeds run the eager rule: each
// worker's own offset survives its restarts, is forgotten by joins and reloads, and is settled
// by the run's last round.
TEST(RandomSchedules, OverlappedBoxesWithPartialDeltasSeeds4001To4040) {
  const uint64_t count = std::getenv("GRADBOX_SCHEDULES") ? std::atoll(std::getenv("GRADBOX_SCHEDULES")) : 40;
  uint64_t salvaged_runs = 0, eager_runs = 0;
  for (uint64_t seed = 4001; seed < 4001 + count; ++seed) {
    ScheduleOptions options;
    options.seed = seed;
    options.inner_steps = 8;
    options.boxed = true;
    options.eager = seed % 2 == 1;
    options.rounds = 30;
    const ScheduleReport report = run_schedule(options);
    EXPECT_TRUE(report.ok) << describe(report);
    salvaged_runs += report.partials_salvaged > 0;
    if (options.eager) {
      EXPECT_GT(report.eager_steps, 0u) << describe(report);
      ++eager_runs;
    } else {
      EXPECT_EQ(report.eager_steps, 0u) << describe(report);
    }
  }
  EXPECT_GT(salvaged_runs, count / 4) << "kills and pauses mid-box should leave partial deltas to pin";
  EXPECT_GE(eager_runs, count / 2);
}

// Seeds that broke an invariant while the protocol was being split into parts, each a
// regression test now: a worker that agreed rounds alone after an outage, a lost agreement
// waited for forever, a dead member's silence taken for a live one's, an owner that left after
// publishing, a restarted owner competing with its successor, an unseen agreement at the end,
// a last round split 4 to 4 that replaying could not mend (1178), a split repaired from a
// checkpoint that the losing side had published before it knew (2362: 14 rounds apart), a
// replay that lost the same round again and again because a reload forgot the peers'
// fingerprints (2638: 13 rounds).
TEST(RandomSchedules, RegressionSeeds) {
  for (uint64_t seed : {2, 4, 6, 7, 8, 13, 14, 20, 23, 24, 29, 30, 31, 34, 37, 39, 40, 50, 53, 65, 66, 74, 77, 79,
                        80, 90, 92, 97, 1178, 2362, 2638}) {
    ScheduleOptions options;
    options.seed = seed;
    const ScheduleReport report = run_schedule(options);
    EXPECT_TRUE(report.ok) << describe(report);
  }
}

// The same seed is the same run.
TEST(RandomSchedules, ASeedReplaysExactly) {
  ScheduleOptions options;
  options.seed = 17;
  const ScheduleReport first = run_schedule(options);
  const ScheduleReport second = run_schedule(options);
  EXPECT_EQ(describe(first), describe(second));
}

}  // namespace
}  // namespace gradbox::sim
