// Runs a range of random schedules (Note [Random schedules] in sim/schedule.h) and prints one
// line per seed, then a summary; exits 1 when any seed broke an invariant. A failing seed
// replays exactly: random_schedules --from SEED --count 1.
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "sim/schedule.h"

int main(int argc, char** argv) {
  uint64_t from = 1, count = 1000, rounds = 60;
  int workers = 8;
  int inner_steps = 1;
  bool boxed = false, eager = false, quiet = false;
  CLI::App app{"random_schedules: the folder protocol under random faults, in virtual time"};
  app.add_option("--from", from, "First seed")->capture_default_str();
  app.add_option("--count", count, "Seeds to run")->capture_default_str();
  app.add_option("--workers", workers, "Workers per run")->capture_default_str();
  app.add_option("--rounds", rounds, "Rounds per run")->capture_default_str();
  app.add_option("--inner-steps", inner_steps, "> 1: DiLoCo rounds of this many inner steps")->capture_default_str();
  app.add_flag("--boxed", boxed, "DiLoCo: overlapped time-boxed rounds with partial deltas");
  app.add_flag("--eager", eager, "With --boxed: the eager rule for rounds applied late");
  app.add_flag("--quiet", quiet, "Print only failing seeds and the summary");
  CLI11_PARSE(app, argc, argv);
  const auto start = std::chrono::steady_clock::now();
  uint64_t failed = 0, divergent = 0, repairs = 0, kills = 0, partitions = 0;
  for (uint64_t seed = from; seed < from + count; ++seed) {
    gradbox::sim::ScheduleOptions options;
    options.seed = seed;
    options.workers = workers;
    options.rounds = rounds;
    options.inner_steps = inner_steps;
    options.boxed = boxed;
    options.eager = eager;
    const gradbox::sim::ScheduleReport report = gradbox::sim::run_schedule(options);
    failed += report.ok ? 0 : 1;
    divergent += report.divergent_rounds;
    repairs += report.repairs;
    kills += static_cast<uint64_t>(report.kills);
    partitions += static_cast<uint64_t>(report.partitions);
    if (!quiet || !report.ok) std::printf("%s\n", gradbox::sim::describe(report).c_str());
    std::fflush(stdout);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("schedules %llu..%llu: %llu ran, %llu failed, %.1f s (%.2f s each); %llu kills, %llu partitions, "
              "%llu divergent rounds, %llu repairs\n",
              static_cast<unsigned long long>(from), static_cast<unsigned long long>(from + count - 1),
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(failed), seconds,
              seconds / static_cast<double>(count), static_cast<unsigned long long>(kills),
              static_cast<unsigned long long>(partitions), static_cast<unsigned long long>(divergent),
              static_cast<unsigned long long>(repairs));
  return failed == 0 ? 0 : 1;
}
