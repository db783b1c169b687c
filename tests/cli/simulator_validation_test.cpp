// The speed-up simulator (Note [Speed-up projection] in sim/projection.h) against the run it
// models: three real `gradbox train --shared` workers and their syncers through the cloud-folder
// simulator with Drive-like lag (scaled down), then a projection of the same cluster from what
// the run itself measured (each step's compute, the exchange's wait taken out) and the folder's
// settings. The projected time per round and cluster tokens/s must be within ±20% of the run's.
// What the projection does not model (the codec's and the files' CPU time, the syncer's copies)
// is inside that margin at this size, or this test says otherwise.
//
// One run is 14-25 rounds of random lag on a shared 2-core machine: its ratio can land 20% out
// now and then (a CI run saw x0.83 where this machine's runs give 0.94-1.06). The test judges
// the median of three runs' ratios, and runs the third only when the first two disagree: two
// within the band put the median there, two out on one side put it out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "cli_fixture.h"
#include "process.h"
#include "common/error.h"
#include "sim/projection.h"

namespace gradbox::testing {
namespace {

// Steps of ~0.1 s and a lag of ~0.2 s a hop: the exchange costs a few steps, as on Drive.
constexpr int kMicroBatch = 16, kBlock = 64;
constexpr double kLagMedianS = 0.2, kLagP90S = 0.35, kSyncerPollS = 0.02;
const std::vector<std::string> kWorkers = {"a", "b", "c"};

struct Measured {
  double seconds_per_round = 0;
  double cluster_tokens_per_s = 0;
  double compute_s_per_step = 0;  // a step's time less its exposed wait on the exchange
};

class SimulatorValidationTest : public CliTest {
 protected:
  // Runs the cluster; measures steps (skip_steps, steps], after start-up and whole rounds.
  static Measured run_cluster(const std::string& name, int steps, int skip_steps, int inner_steps,
                              std::vector<std::string> extra) {
    const fs::path base = dir(name);
    fs::create_directories(base);
    std::map<std::string, pid_t> pids;
    for (const std::string& w : kWorkers) {
      std::vector<std::string> argv =
          train(base / w, {"--block-size", std::to_string(kBlock), "--micro-batch", std::to_string(kMicroBatch),
                           "--max-steps", std::to_string(steps), "--checkpoint-interval", "0", "--dropout", "0",
                           "--local-workers", "3", "--shared", (base / "shared").string(), "--worker", w, "--peers",
                           "a,b,c", "--sync-backend", "sim", "--sync-args",
                           str("--poll-ms ", std::lround(kSyncerPollS * 1000), " --sim-seed ", int{w[0]},
                               " --sim-delay-median-ms ", std::lround(kLagMedianS * 1000), " --sim-delay-p90-ms ",
                               std::lround(kLagP90S * 1000))});
      argv.insert(argv.end(), extra.begin(), extra.end());
      pids[w] = start_process(argv, base / (w + ".log"));
    }
    for (const auto& [w, pid] : pids) EXPECT_EQ(wait_process(pid), 0) << w << "\n" << read_bytes(base / (w + ".log"));

    Measured m;
    double compute = 0, compute_steps = 0;
    for (const std::string& w : kWorkers) {
      double seconds = 0;
      int64_t tokens_before = -1, tokens_after = 0;
      for (const nlohmann::json& line : read_metrics(base / w)) {
        if (!line.contains("step_seconds")) continue;
        const int step = line["step"].get<int>();
        if (step == skip_steps) tokens_before = line["tokens"].get<int64_t>();
        if (step <= skip_steps) continue;
        seconds += line["step_seconds"].get<double>();
        compute += line["step_seconds"].get<double>() - line["exchange_wait_seconds"].get<double>();
        compute_steps += 1;
        tokens_after = line["tokens"].get<int64_t>();
      }
      EXPECT_GE(tokens_before, 0) << w << ": no metrics line for step " << skip_steps;
      const double rounds = static_cast<double>(steps - skip_steps) / inner_steps;
      m.seconds_per_round += seconds / rounds / static_cast<double>(kWorkers.size());
      m.cluster_tokens_per_s += static_cast<double>(tokens_after - tokens_before) / seconds / static_cast<double>(kWorkers.size());
    }
    m.compute_s_per_step = compute / compute_steps;
    return m;
  }

  // The same cluster projected: the compute the run measured, the folder's lag and polls.
  static sim::Projection project(const Measured& run, sim::ProjectedMode mode, int overlap_steps, int inner_steps) {
    sim::ProjectionConfig c;
    c.workers = static_cast<int>(kWorkers.size());
    c.model_parameters = 1;  // links unlimited (0 MB/s): the files' sizes cost nothing here
    c.upload_mb_s = c.download_mb_s = 0;
    c.tokens_per_step = kMicroBatch * kBlock;
    c.tokens_per_s = static_cast<double>(c.tokens_per_step) / run.compute_s_per_step;
    c.mode = mode;
    c.overlap_steps = overlap_steps;
    c.inner_steps = inner_steps;
    c.lag_median_s = kLagMedianS;
    c.lag_p90_s = kLagP90S;
    c.request_s = kSyncerPollS;   // a file waits about half a poll to go up and half to come down
    c.syncer_pass_s = kSyncerPollS;
    c.poll_s = 0.01;
    // gradbox train's defaults.
    c.contribution_timeout_s = 30;
    c.deadline_floor_s = 2;
    c.heartbeat_interval_s = 10;
    // 200 rounds, so that the start-up (the founder's checkpoint, the others' fetch) is noise.
    c.hours = 200.0 * inner_steps * run.compute_s_per_step / 3600;
    c.checkpoint_hours = c.hours;
    return sim::project(c);
  }

  struct Ratios {
    double round = 0, tokens = 0;
  };

  static Ratios measure_once(const std::string& what, const Measured& run, const sim::Projection& p) {
    EXPECT_TRUE(p.failures.empty()) << (p.failures.empty() ? "" : p.failures.front());
    const Ratios r{p.seconds_per_round / run.seconds_per_round, p.cluster_tokens_per_s / run.cluster_tokens_per_s};
    std::printf("%-28s compute %.3f s/step | s/round measured %.3f projected %.3f (x%.2f) | "
                "tokens/s measured %.0f projected %.0f (x%.2f)\n",
                what.c_str(), run.compute_s_per_step, run.seconds_per_round, p.seconds_per_round, r.round,
                run.cluster_tokens_per_s, p.cluster_tokens_per_s, r.tokens);
    return r;
  }

  static bool within(double ratio) { return std::abs(ratio - 1.0) <= 0.2; }

  // The median of up to three runs' ratios must be within ±20% (the header says why three).
  template <typename MeasureOnce>
  static void expect_median_within(const std::string& what, MeasureOnce measure) {
    std::vector<Ratios> runs = {measure(what + " #1"), measure(what + " #2")};
    const auto agree = [&](auto field) {
      const bool in0 = within(runs[0].*field), in1 = within(runs[1].*field);
      return in0 == in1 && (in0 || (runs[0].*field > 1.0) == (runs[1].*field > 1.0));
    };
    if (!agree(&Ratios::round) || !agree(&Ratios::tokens)) runs.push_back(measure(what + " #3"));
    const auto median = [&](auto field) {
      std::vector<double> v;
      for (const Ratios& r : runs) v.push_back(r.*field);
      std::sort(v.begin(), v.end());
      return v.size() == 3 ? v[1] : (v[0] + v[1]) / 2;  // two that agree: a third cannot change the verdict
    };
    EXPECT_NEAR(median(&Ratios::round), 1.0, 0.2) << what << ": projected time per round against measured (median)";
    EXPECT_NEAR(median(&Ratios::tokens), 1.0, 0.2) << what << ": projected cluster tokens/s against measured (median)";
  }
};

TEST_F(SimulatorValidationTest, PerStepShardedWithOverlapIsProjectedWithinTwentyPercent) {
  int n = 0;
  expect_median_within("per-step sharded, overlap", [&](const std::string& what) {
    const Measured run = run_cluster(str("validate_overlap_", ++n), 30, 5, 1, {"--exchange", "sharded", "--overlap"});
    return measure_once(what, run, project(run, sim::ProjectedMode::per_step_sharded, 1, 1));
  });
}

TEST_F(SimulatorValidationTest, PerStepShardedIsProjectedWithinTwentyPercent) {
  int n = 0;
  expect_median_within("per-step sharded", [&](const std::string& what) {
    const Measured run = run_cluster(str("validate_sharded_", ++n), 30, 5, 1, {"--exchange", "sharded"});
    return measure_once(what, run, project(run, sim::ProjectedMode::per_step_sharded, 0, 1));
  });
}

TEST_F(SimulatorValidationTest, DilocoRoundsAreProjectedWithinTwentyPercent) {
  int n = 0;
  expect_median_within("DiLoCo H=4", [&](const std::string& what) {
    const Measured run = run_cluster(str("validate_diloco_", ++n), 64, 8, 4, {"--sync", "diloco", "--inner-steps", "4"});
    return measure_once(what, run, project(run, sim::ProjectedMode::diloco, 0, 4));
  });
}

}  // namespace
}  // namespace gradbox::testing
