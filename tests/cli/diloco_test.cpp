// DiLoCo rounds (Note [DiLoCo rounds] in src/worker/outer_optimizer.h) in real processes:
// its exactness against per-step averaging, three workers through the faulty cloud-folder
// simulator against one process emulating them, quantised deltas, a stop inside a round, and
// a joiner with other round settings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "cli_fixture.h"
#include "process.h"

namespace gradbox::testing {
namespace {

struct Worker {
  std::string name;
  int micro_batch;
};
const std::vector<Worker> kWorkers = {{"a", 4}, {"b", 2}, {"c", 3}};

// One fp32 tensor of a safetensors file, as raw bytes (empty when absent).
std::string tensor_bytes(const fs::path& file, const std::string& name) {
  const std::string bytes = read_bytes(file);
  if (bytes.size() < 8) return "";
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size));
  if (!header.contains(name)) return "";
  const auto offsets = header[name]["data_offsets"];
  const size_t begin = 8 + header_size + offsets[0].get<size_t>();
  return bytes.substr(begin, offsets[1].get<size_t>() - offsets[0].get<size_t>());
}

// Every tensor of a model.safetensors file, concatenated in name order, as floats.
std::vector<float> all_floats(const fs::path& file) {
  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size));
  std::vector<float> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const size_t begin = 8 + header_size + info["data_offsets"][0].get<size_t>();
    const size_t end = 8 + header_size + info["data_offsets"][1].get<size_t>();
    const size_t at = out.size();
    out.resize(at + (end - begin) / sizeof(float));
    std::memcpy(out.data() + at, bytes.data() + begin, end - begin);
  }
  return out;
}

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return worst;
}

class DilocoTest : public CliTest {
 protected:
  static constexpr int kSteps = 20;

  static std::vector<std::string> tiny(const fs::path& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = train(out, {"--block-size", "32", "--max-steps", std::to_string(kSteps),
                                                "--checkpoint-interval", "0", "--dropout", "0"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  static fs::path final_checkpoint(const fs::path& run, int step = kSteps) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", step);
    return run / "checkpoints" / name;
  }

  // Every worker of kWorkers through the faulty simulated folder; returns when all have exited.
  static void run_cluster(const fs::path& base, const std::vector<std::string>& extra,
                          const std::vector<Worker>& workers = kWorkers) {
    fs::create_directories(base);
    std::map<std::string, pid_t> pids;
    for (const Worker& w : workers) {
      std::vector<std::string> argv = tiny(base / w.name, extra);
      const std::string folder = "--poll-ms 20 --sim-seed " + std::to_string(w.name[0]) +
                                 " --sim-delay-median-ms 50 --sim-delay-p90-ms 200 --sim-placeholder-prob 0.2"
                                 " --sim-truncate-prob 0.2 --sim-corrupt-prob 0.05 --sim-stale-list-prob 0.1"
                                 " --sim-missing-prob 0.1 --sim-duplicate-prob 0.1";
      argv.insert(argv.end(), {"--micro-batch", std::to_string(w.micro_batch), "--local-workers", "3", "--shared",
                               (base / "shared").string(), "--worker", w.name, "--peers", "a,b,c", "--sync-backend",
                               "sim", "--sync-args", folder});
      pids[w.name] = start_process(argv, base / (w.name + ".log"));
    }
    for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << read_bytes(base / (name + ".log"));
  }

  // One process on the union of the workers' batches, each emulated worker with its own inner state.
  static fs::path emulate(const fs::path& base, std::vector<std::string> extra) {
    const fs::path run = base / "union";
    extra.insert(extra.end(), {"--emulate-workers", "a:4,b:2,c:3"});
    const ProcessResult r = run_process(tiny(run, extra));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run;
  }

  static nlohmann::json exchange_stats(const fs::path& run) {
    return nlohmann::json::parse(read_bytes(run / "sync" / "exchange" / "stats.json"));
  }

  static std::vector<nlohmann::json> records(const fs::path& run, const std::string& key) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& r : read_metrics(run))
      if (r.contains(key)) out.push_back(r);
    return out;
  }
};

// DiLoCo's claim in its simplest case: one inner SGD step, outer lr 1 and no momentum is
// exactly per-step averaging (the outer step subtracts the averaged update the inner steps made).
TEST_F(DilocoTest, OneInnerSgdStepWithOuterLrOneIsPerStepAveraging) {
  const fs::path base = dir("diloco_h1");
  const std::vector<std::string> sgd = {"--optimizer", "sgd", "--lr", "0.5", "--grad-clip", "0",
                                        "--emulate-workers", "a:4,b:2,c:3"};
  std::vector<std::string> per_step = sgd, diloco = sgd;
  diloco.insert(diloco.end(), {"--sync", "diloco", "--inner-steps", "1", "--outer-lr", "1", "--outer-momentum", "0"});
  const ProcessResult a = run_process(tiny(base / "per_step", per_step));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const ProcessResult b = run_process(tiny(base / "diloco", diloco));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<float> reference = all_floats(final_checkpoint(base / "per_step") / "model.safetensors");
  const std::vector<float> rounds = all_floats(final_checkpoint(base / "diloco") / "model.safetensors");
  ASSERT_FALSE(reference.empty());
  // theta - (theta - theta_i) differs from the per-step update by an ulp or so of theta.
  const double worst = largest_difference(reference, rounds);
  std::cout << "H=1 DiLoCo vs per-step, largest parameter difference after " << kSteps << " steps: " << worst << "\n";
  EXPECT_LT(worst, 1e-5);
  // It is not the initial model: both trained.
  EXPECT_EQ(records(base / "diloco", "round").size(), static_cast<size_t>(kSteps));
  const std::vector<nlohmann::json> losses = records(base / "diloco", "loss");
  EXPECT_LT(losses.back()["loss"].get<double>(), losses.front()["loss"].get<double>() - 0.3);
}

TEST_F(DilocoTest, ThreeWorkersFp32MatchOneProcessEmulatingThemBitForBit) {
  const fs::path base = dir("diloco_fp32");
  const std::vector<std::string> flags = {"--sync", "diloco", "--inner-steps", "5", "--codec", "fp32"};
  run_cluster(base, flags);
  const fs::path reference = emulate(base, flags);
  const fs::path ref = final_checkpoint(reference);
  const std::string model = read_bytes(ref / "model.safetensors");
  const std::string momentum = tensor_bytes(ref / "optimizer.safetensors", "outer.momentum");
  ASSERT_FALSE(model.empty());
  ASSERT_FALSE(momentum.empty());
  for (const Worker& w : kWorkers) {
    const fs::path mine = final_checkpoint(base / w.name);
    EXPECT_EQ(read_bytes(mine / "model.safetensors"), model) << w.name;
    EXPECT_EQ(tensor_bytes(mine / "optimizer.safetensors", "outer.momentum"), momentum) << w.name;
    // At the run's end θ_g is the parameters, saved once (4 bytes a parameter less to fetch).
    EXPECT_TRUE(tensor_bytes(mine / "optimizer.safetensors", "outer.global").empty()) << w.name;
    EXPECT_EQ(nlohmann::json::parse(read_bytes(mine / "state.json"))["outer"]["global"], "parameters") << w.name;
    // Four rounds of five steps, each agreed and fingerprinted, and nothing refused.
    const nlohmann::json stats = exchange_stats(base / w.name);
    EXPECT_EQ(stats["round"], kSteps / 5) << stats.dump();
    EXPECT_EQ(stats["fingerprint_mismatches"], 0);
    EXPECT_GT(stats["fingerprints_checked"].get<int>(), 0);
    EXPECT_EQ(stats["rejected_files"], 0);
    EXPECT_EQ(records(base / w.name, "round").size(), 4u) << w.name;
  }
  // The folder checkpoint at the end is keyed by the rounds it holds, not the steps.
  EXPECT_TRUE(fs::exists(base / "a" / "sync" / "outbox" / "checkpoints") );
  bool round_keyed = false;
  for (const auto& entry : fs::directory_iterator(base / "shared" / "checkpoints"))
    round_keyed |= entry.path().filename().string().starts_with("s00000004-");
  EXPECT_TRUE(round_keyed);
  // `gradbox status` shows the mode, the rounds, the steps behind them and the bytes per token.
  const ProcessResult status = run_process({kBinary, "status", "--shared", (base / "shared").string()});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(contains(status.output, "sync: diloco H=5 ")) << status.output;
  EXPECT_TRUE(contains(status.output, "        4       20 ")) << status.output;  // round 4, step 20
  EXPECT_TRUE(contains(status.output, "bytes per token trained")) << status.output;
  // Training happened: the union's loss fell.
  const std::vector<nlohmann::json> losses = records(reference, "round_loss");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_LT(losses.back()["round_loss"].get<double>(), losses.front()["round_loss"].get<double>() - 0.3);
}

// Outer steps applied late (overlapped rounds, and streaming fragments overlapped by a step),
// with the delayed rule and with the eager one (Note [Eager outer steps]), through the faulty
// simulated folder: every replica and the one process emulating them end on the same bytes, θ_g
// and momentum included; the two rules end on different ones, and only the eager one keeps its
// offset in the checkpoint.
TEST_F(DilocoTest, LateOuterStepsMatchOneProcessEmulatingThemBitForBit) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"overlap", {"--inner-steps", "5", "--overlap-steps", "3"}},
      {"fragments", {"--inner-steps", "4", "--fragments", "2", "--overlap-steps", "1"}}};
  for (const auto& [name, mode] : modes) {
    std::map<std::string, std::string> models;
    for (const std::string rule : {"delayed", "eager"}) {
      const fs::path base = dir("diloco_late_" + name + "_" + rule);
      std::vector<std::string> flags = {"--sync", "diloco", "--codec", "fp32", "--deadline-floor", "30",
                                        "--late-outer-step", rule};
      flags.insert(flags.end(), mode.begin(), mode.end());
      run_cluster(base, flags);
      const fs::path ref = final_checkpoint(emulate(base, flags));
      const std::string model = read_bytes(ref / "model.safetensors");
      ASSERT_FALSE(model.empty()) << name << " " << rule;
      models[rule] = model;
      for (const Worker& w : kWorkers) {
        const fs::path mine = final_checkpoint(base / w.name);
        EXPECT_EQ(read_bytes(mine / "model.safetensors"), model) << name << " " << rule << " " << w.name;
        for (const char* key : {"outer.momentum", "outer.global"})
          EXPECT_EQ(tensor_bytes(mine / "optimizer.safetensors", key), tensor_bytes(ref / "optimizer.safetensors", key))
              << name << " " << rule << " " << w.name << " " << key;
        for (const nlohmann::json& r : records(base / w.name, "round")) EXPECT_EQ(r["contributors"], 3) << r.dump();
      }
      EXPECT_EQ(tensor_bytes(ref / "optimizer.safetensors", "outer.eager_offset").empty(), rule == "delayed") << name;
    }
    EXPECT_NE(models["delayed"], models["eager"]) << name << ": the eager rule changed nothing";
  }
}

// int8 (sharded: quantised twice, contributions and reduced shards) and int4 (all-gather) with
// error feedback: the replicas stay byte-identical, and the run stays near the exact fp32 one.
// Stated tolerances: the round losses within 0.02 and the parameters within 2% (relative L2).
TEST_F(DilocoTest, QuantisedDeltasKeepReplicasIdenticalAndStayNearFp32) {
  const fs::path reference = emulate(dir("diloco_exact"), {"--sync", "diloco", "--inner-steps", "5"});
  const std::vector<float> exact_params = all_floats(final_checkpoint(reference) / "model.safetensors");
  for (const auto& [codec, pattern] : std::vector<std::pair<std::string, std::string>>{{"int8", "sharded"},
                                                                                     {"int4", "all-gather"}}) {
    const fs::path base = dir("diloco_" + codec);
    run_cluster(base, {"--sync", "diloco", "--inner-steps", "5", "--codec", codec, "--exchange", pattern});
    const std::string model_a = read_bytes(final_checkpoint(base / "a") / "model.safetensors");
    ASSERT_FALSE(model_a.empty());
    for (const Worker& w : kWorkers)
      EXPECT_EQ(read_bytes(final_checkpoint(base / w.name) / "model.safetensors"), model_a) << codec << " " << w.name;
    const std::vector<nlohmann::json> quantised = records(base / "a", "round_loss");
    const std::vector<nlohmann::json> exact = records(reference, "round_loss");
    ASSERT_EQ(quantised.size(), exact.size());
    double worst = 0;
    for (size_t i = 0; i < exact.size(); ++i)
      worst = std::max(worst, std::abs(quantised[i]["round_loss"].get<double>() - exact[i]["round_loss"].get<double>()));
    const std::vector<float> params = all_floats(final_checkpoint(base / "a") / "model.safetensors");
    ASSERT_EQ(params.size(), exact_params.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      diff += (params[i] - exact_params[i]) * static_cast<double>(params[i] - exact_params[i]);
      norm += exact_params[i] * static_cast<double>(exact_params[i]);
    }
    const double relative = std::sqrt(diff / norm);
    std::cout << codec << " " << pattern << " DiLoCo vs fp32 emulation: largest round-loss difference " << worst
              << ", parameters " << relative << " (relative L2)\n";
    EXPECT_LT(worst, 0.02) << codec;
    EXPECT_LT(relative, 0.02) << codec;
    EXPECT_GT(relative, 0.0) << codec << ": a lossy codec that changed nothing was not used";
  }
}

// --sync-warmup-steps: per-step rounds first (the same run as --sync gradient up to there),
// then DiLoCo rounds counted on from the per-step ones.
TEST_F(DilocoTest, WarmUpStepsArePerStepRoundsAndDiLoCoRoundsFollow) {
  const fs::path base = dir("diloco_warmup");
  const std::vector<std::string> union_flags = {"--emulate-workers", "a:4,b:2,c:3"};
  std::vector<std::string> warm = union_flags;
  warm.insert(warm.end(), {"--sync", "diloco", "--inner-steps", "5", "--sync-warmup-steps", "10"});
  ASSERT_EQ(run_process(tiny(base / "per_step", union_flags)).exit_code, 0);
  const ProcessResult r = run_process(tiny(base / "warm", warm));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> per_step = records(base / "per_step", "loss");
  const std::vector<nlohmann::json> warmed = records(base / "warm", "loss");
  ASSERT_EQ(per_step.size(), warmed.size());
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(per_step[i]["loss"], warmed[i]["loss"]) << "step " << i + 1;
  EXPECT_NE(per_step[12]["loss"], warmed[12]["loss"]);  // DiLoCo from step 11 on
  const std::vector<nlohmann::json> rounds = records(base / "warm", "round");
  ASSERT_EQ(rounds.size(), 2u);  // steps 11-15 and 16-20
  EXPECT_EQ(rounds[0]["round"], 11);
  EXPECT_EQ(rounds[0]["step"], 15);
  EXPECT_EQ(rounds[1]["step"], 20);
}

// A checkpoint another worker wrote (a folder checkpoint adopted at a join, when the joiner
// restarts before writing one of its own) gives only the run's state: θ_g, not that worker's
// progress in the fragments' rounds under way, which it counts itself.
TEST_F(DilocoTest, ResumingFromAnotherWorkersCheckpointTakesOnlyTheRunsState) {
  const fs::path base = dir("diloco_foreign_checkpoint");
  const std::vector<std::string> flags = {"--sync", "diloco", "--inner-steps", "4", "--fragments", "2"};
  auto as = [&](const fs::path& run, const std::string& worker, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = tiny(run, flags);
    argv.insert(argv.end(), {"--worker", worker, "--peers", worker, "--shared", (base / (worker + "_shared")).string(),
                             "--sync-backend", "sim",
                             // Alone in its run: a resumed worker waits until its old self is stale before it goes on.
                             "--failover-timeout", "2", "--contribution-timeout", "1", "--deadline-floor", "0.5",
                             "--stale-after", "2", "--heartbeat-interval", "0.5"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const ProcessResult first = run_process(as(base / "x", "x", {"--stop-at-step", "7"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const nlohmann::json state = nlohmann::json::parse(read_bytes(final_checkpoint(base / "x", 7) / "state.json"));
  ASSERT_GT(state["outer"]["round_tokens"][0].get<int64_t>() + state["outer"]["round_tokens"][1].get<int64_t>(), 0);
  fs::create_directories(base / "y" / "checkpoints");
  fs::copy(final_checkpoint(base / "x", 7), final_checkpoint(base / "y", 7), fs::copy_options::recursive);

  const ProcessResult own = run_process(as(base / "x", "x"));
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_FALSE(contains(own.output, "was written by")) << own.output;
  const ProcessResult foreign = run_process(as(base / "y", "y"));
  ASSERT_EQ(foreign.exit_code, 0) << foreign.output;
  EXPECT_TRUE(contains(foreign.output, "was written by x")) << foreign.output;
  // The first round after step 7: x's holds its steps before the stop, y's only its own.
  auto first_round_after = [&](const fs::path& run) {
    for (const nlohmann::json& r : records(run, "round"))
      if (r["step"].get<int>() > 7) return r["round_tokens"].get<int64_t>();
    return int64_t{-1};
  };
  const int64_t kept = first_round_after(base / "x"), fresh = first_round_after(base / "y");
  ASSERT_GT(fresh, 0);
  EXPECT_LT(fresh, kept);
}

// A stop inside a round (Ctrl-C) keeps the round's progress: the resumed run ends on the same
// bytes as one that never stopped.
TEST_F(DilocoTest, AStopInsideARoundResumesBitForBit) {
  const fs::path base = dir("diloco_stop");
  const std::vector<std::string> flags = {"--sync", "diloco", "--inner-steps", "5"};
  const ProcessResult whole = run_process(tiny(base / "whole", flags));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  std::vector<std::string> stopping = flags;
  stopping.insert(stopping.end(), {"--stop-at-step", "7"});
  const ProcessResult first = run_process(tiny(base / "stopped", stopping));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(final_checkpoint(base / "stopped", 7))) << first.output;
  const nlohmann::json state = nlohmann::json::parse(read_bytes(final_checkpoint(base / "stopped", 7) / "state.json"));
  EXPECT_EQ(state["round"], 1);                  // round 2 was under way
  EXPECT_GT(state["outer"]["round_tokens"], 0);  // with two inner steps done
  const ProcessResult second = run_process(tiny(base / "stopped", flags));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(contains(second.output, "resumed from")) << second.output;
  EXPECT_EQ(read_bytes(final_checkpoint(base / "stopped") / "model.safetensors"),
            read_bytes(final_checkpoint(base / "whole") / "model.safetensors"));
  EXPECT_EQ(tensor_bytes(final_checkpoint(base / "stopped") / "optimizer.safetensors", "outer.momentum"),
            tensor_bytes(final_checkpoint(base / "whole") / "optimizer.safetensors", "outer.momentum"));
}

TEST_F(DilocoTest, BadRoundFlagsAreNamed) {
  const fs::path base = dir("diloco_flags");
  for (const auto& [flag, value, text] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--sync", "local-sgd", "--sync: unknown mode 'local-sgd'"},
           {"--inner-steps", "0", "--inner-steps: must be >= 1"},
           {"--outer-momentum", "1", "--outer-momentum: must be in [0, 1)"},
           {"--outer-lr", "0", "--outer-lr: must be > 0"},
           {"--late-outer-step", "early", "--late-outer-step: unknown rule 'early' (eager, delayed)"}}) {
    const ProcessResult r = run_process(tiny(base / "run", {"--sync", "diloco", flag, value}));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, text)) << r.output;
  }
  EXPECT_FALSE(fs::exists(base / "run" / "checkpoints"));
}

}  // namespace
}  // namespace gradbox::testing

namespace gradbox::testing {
namespace {

// Time-boxed rounds (Note [Time-boxed rounds] in src/worker/outer_optimizer.h) with c three
// times slower than a and b (three times their micro-batch): each worker computes what fits in
// the box, every round holds all three, and the average weighs each by the tokens it computed.
// (That a slow worker costs the others no waiting is shown in virtual time, in
// tests/exchange/elastic_protocol_test.cpp: here the clock is real.)
const std::vector<Worker> kOneSlow = {{"a", 2}, {"b", 2}, {"c", 6}};

// worker -> its metrics records holding `key`, one per round.
std::map<std::string, std::vector<nlohmann::json>> per_worker(const fs::path& base, const std::string& key) {
  std::map<std::string, std::vector<nlohmann::json>> out;
  for (const Worker& w : kOneSlow)
    for (const nlohmann::json& r : read_metrics(base / w.name))
      if (r.contains(key)) out[w.name].push_back(r);
  return out;
}

// Every round holds all three, each worker took 1 .. H-1 steps in the first `boxed` rounds (its
// box ended them, not H), and the round's tokens are the sum of each worker's.
void expect_boxed_rounds_hold_everyone(const std::map<std::string, std::vector<nlohmann::json>>& rounds, int count,
                                       int inner, int boxed) {
  for (const Worker& w : kOneSlow) ASSERT_EQ(rounds.at(w.name).size(), static_cast<size_t>(count)) << w.name;
  for (int r = 0; r < count; ++r) {
    const nlohmann::json& a = rounds.at("a")[r];
    EXPECT_EQ(a["contributors"], 3) << "round " << r + 1;
    int64_t tokens = 0;
    for (const Worker& w : kOneSlow) {
      const int64_t steps = rounds.at(w.name)[r]["inner_steps"].get<int64_t>();
      EXPECT_GE(steps, 1) << w.name << " round " << r + 1;
      if (r < boxed) {
        EXPECT_LT(steps, inner) << w.name << " round " << r + 1 << ": the box, not the cap, ended it";
      }
      tokens += steps * w.micro_batch * 32;
    }
    EXPECT_EQ(a["round_tokens"].get<int64_t>(), tokens) << "round " << r + 1 << ": each worker's tokens, summed";
  }
}

void expect_identical_replicas(const fs::path& base, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  const std::string a = read_bytes(base / "a" / "checkpoints" / name / "model.safetensors");
  ASSERT_FALSE(a.empty()) << "no checkpoint of step " << step;
  EXPECT_EQ(a, read_bytes(base / "b" / "checkpoints" / name / "model.safetensors"));
  EXPECT_EQ(a, read_bytes(base / "c" / "checkpoints" / name / "model.safetensors"));
}

TEST_F(DilocoTest, TimeBoxedRoundsTakeWhatFitsAndWeighItByTokens) {
  const fs::path base = dir("diloco_boxed");
  constexpr int kRounds = 4, kInner = 1000;
  run_cluster(base,
              {"--sync", "diloco", "--inner-steps", std::to_string(kInner), "--max-steps",
               std::to_string(kRounds * kInner), "--round-seconds", "1.5", "--eval-interval", "0"},
              kOneSlow);
  const auto rounds = per_worker(base, "inner_steps");
  expect_boxed_rounds_hold_everyone(rounds, kRounds, kInner, kRounds);
  int64_t a_steps = 0, c_steps = 0;
  for (int r = 0; r < kRounds; ++r) {
    for (const Worker& w : kOneSlow)
      EXPECT_EQ(rounds.at(w.name)[r]["step"], (r + 1) * kInner) << "rounds end at their nominal step";
    a_steps += rounds.at("a")[r]["inner_steps"].get<int64_t>();
    c_steps += rounds.at("c")[r]["inner_steps"].get<int64_t>();
  }
  std::cout << "time-boxed DiLoCo: a took " << a_steps << " inner steps, c (3x the micro-batch) " << c_steps << "\n";
  EXPECT_LT(c_steps, a_steps) << "c is slower: it fits fewer steps in the box";
  expect_identical_replicas(base, kRounds * kInner);
}

// Note [Overlapped time-boxed rounds]: the boxes with --overlap-steps. Each worker sends its Δ
// when its box closes and goes on computing; the round before is applied (merged) once agreed,
// and its agreement times the next box. Every round still holds all three, weighs each by its
// tokens, and the replicas end identical.
TEST_F(DilocoTest, OverlappedTimeBoxedRoundsKeepEveryoneAndAgree) {
  const fs::path base = dir("diloco_boxed_overlap");
  constexpr int kRounds = 4, kInner = 1000;
  run_cluster(base,
              {"--sync", "diloco", "--inner-steps", std::to_string(kInner), "--overlap-steps", std::to_string(kInner - 1),
               "--max-steps", std::to_string(kRounds * kInner), "--round-seconds", "1.5", "--eval-interval", "0"},
              kOneSlow);
  // The last round may end at --max-steps rather than at its box.
  expect_boxed_rounds_hold_everyone(per_worker(base, "inner_steps"), kRounds, kInner, kRounds - 1);
  expect_identical_replicas(base, kRounds * kInner);
}

// The same with boxes longer than a round's steps take: each round ends at its H-th step, not
// at its box, while the round before may still be in flight. That round is applied first, as
// when a box closes (the two share the Δ buffer); this once overwrote the Δ being averaged and
// crashed the workers (found by scripts/bench/diloco_bench.sh with the headline's flags).
TEST_F(DilocoTest, OverlappedBoxesThatOutlastTheirStepsKeepEveryoneAndAgree) {
  const fs::path base = dir("diloco_boxed_overlap_fits");
  constexpr int kRounds = 6, kInner = 5;
  run_cluster(base,
              {"--sync", "diloco", "--inner-steps", std::to_string(kInner), "--overlap-steps", std::to_string(kInner - 1),
               "--max-steps", std::to_string(kRounds * kInner), "--round-seconds", "120", "--eval-interval", "0"},
              kOneSlow);
  const auto rounds = per_worker(base, "inner_steps");
  for (const Worker& w : kOneSlow) ASSERT_EQ(rounds.at(w.name).size(), static_cast<size_t>(kRounds)) << w.name;
  for (int r = 0; r < kRounds; ++r) {
    EXPECT_EQ(rounds.at("a")[r]["contributors"], 3) << "round " << r + 1;
    for (const Worker& w : kOneSlow) EXPECT_EQ(rounds.at(w.name)[r]["inner_steps"], kInner) << w.name << " round " << r + 1;
  }
  expect_identical_replicas(base, kRounds * kInner);
}

TEST_F(DilocoTest, TimeBoxedPerStepRoundsAccumulateWhatFits) {
  const fs::path base = dir("per_step_boxed");
  constexpr int kBoxedSteps = 8, kMost = 4096;  // far more than a 0.4 s box holds on any machine
  run_cluster(base, {"--grad-accum", std::to_string(kMost), "--max-steps", std::to_string(kBoxedSteps), "--round-seconds",
                     "0.4", "--eval-interval", "0"},
              kOneSlow);
  const auto steps = per_worker(base, "micro_batches");
  int64_t a_micro = 0, c_micro = 0;
  for (const Worker& w : kOneSlow) ASSERT_EQ(steps.at(w.name).size(), static_cast<size_t>(kBoxedSteps)) << w.name;
  for (int k = 0; k < kBoxedSteps; ++k) {
    int64_t tokens = 0;
    for (const Worker& w : kOneSlow) {
      const int64_t micro = steps.at(w.name)[k]["micro_batches"].get<int64_t>();
      EXPECT_GE(micro, 1) << w.name << " step " << k + 1;
      EXPECT_LT(micro, kMost) << w.name << " step " << k + 1 << ": the box, not --grad-accum, ended it";
      tokens += micro * w.micro_batch * 32;
    }
    // a's "tokens" counts every worker's: each step adds what the three accumulated.
    const int64_t before = k == 0 ? 0 : steps.at("a")[k - 1]["tokens"].get<int64_t>();
    EXPECT_EQ(steps.at("a")[k]["tokens"].get<int64_t>() - before, tokens) << "step " << k + 1;
    a_micro += steps.at("a")[k]["micro_batches"].get<int64_t>();
    c_micro += steps.at("c")[k]["micro_batches"].get<int64_t>();
  }
  std::cout << "time-boxed per-step: a accumulated " << a_micro << " micro-batches, c (3x the size) " << c_micro << "\n";
  EXPECT_LT(c_micro, a_micro) << "c is slower: it fits fewer micro-batches in the box";
  expect_identical_replicas(base, kBoxedSteps);
}

TEST_F(DilocoTest, RoundSecondsWithNothingToBoxIsRefused) {
  const fs::path base = dir("boxed_flags");
  ProcessResult r = run_process(tiny(base / "a", {"--round-seconds", "5"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--round-seconds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--grad-accum"), std::string::npos) << r.output;
  r = run_process(tiny(base / "b", {"--sync", "diloco", "--inner-steps", "1", "--round-seconds", "5"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--inner-steps"), std::string::npos) << r.output;
  r = run_process(tiny(base / "c", {"--round-seconds", "-1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--round-seconds"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gradbox::testing

namespace gradbox::testing {
namespace {

// Streaming fragments (Note [Streaming fragments] in src/worker/outer_optimizer.h). With one
// worker, outer lr 1 and no momentum, every outer step hands the fragment back its own local
// parameters: a run with fragments, overlapped or not, is plain training, so a lost local step
// (an assigned rather than merged late update) or a fragment applied to the wrong elements
// shows as a difference from the run without rounds.
TEST_F(DilocoTest, OneWorkersFragmentsWithOuterLrOneKeepEveryLocalStep) {
  const fs::path base = dir("fragments_identity");
  const std::vector<std::string> sgd = {"--optimizer", "sgd", "--lr", "0.5", "--grad-clip", "0"};
  std::vector<std::string> plain = sgd;
  const ProcessResult reference_run = run_process(tiny(base / "plain", plain));
  ASSERT_EQ(reference_run.exit_code, 0) << reference_run.output;
  const std::vector<float> reference = all_floats(final_checkpoint(base / "plain") / "model.safetensors");
  for (const std::string overlap : {"0", "1"}) {
    std::vector<std::string> streaming = sgd;
    streaming.insert(streaming.end(), {"--sync", "diloco", "--inner-steps", "4", "--fragments", "2", "--overlap-steps",
                                       overlap, "--outer-lr", "1", "--outer-momentum", "0"});
    const fs::path run = base / ("overlap" + overlap);
    const ProcessResult r = run_process(tiny(run, streaming));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double worst = largest_difference(reference, all_floats(final_checkpoint(run) / "model.safetensors"));
    std::cout << "fragments 2, overlap " << overlap << ": largest difference from plain training " << worst << "\n";
    EXPECT_LT(worst, 1e-5) << "overlap " << overlap;
    // A round every 2 steps, fragments in turn, and at the end the other fragment once more.
    const std::vector<nlohmann::json> rounds = records(run, "fragment");
    ASSERT_EQ(rounds.size(), static_cast<size_t>(kSteps / 2 + 1));
    for (size_t i = 0; i < rounds.size(); ++i) EXPECT_EQ(rounds[i]["fragment"], i % 2) << "round " << i + 1;
    // Each step's tokens are in one round of each fragment, and counted once.
    EXPECT_EQ(records(run, "tokens").back()["tokens"], kSteps * 8 * 32);
  }
}

// --inner-lr-scale multiplies the whole schedule in DiLoCo's inner steps: one worker's rounds
// with outer lr 1 and no momentum are plain training, so scale 0.5 on lr 0.5 is plain training
// at lr 0.25 (and without the scale it is not).
TEST_F(DilocoTest, InnerLrScaleScalesTheInnerSchedule) {
  const fs::path base = dir("inner_lr_scale");
  auto sgd = [](const char* lr, const char* min_lr) {
    return std::vector<std::string>{"--optimizer", "sgd", "--lr", lr, "--min-lr", min_lr, "--grad-clip", "0"};
  };
  ASSERT_EQ(run_process(tiny(base / "plain", sgd("0.25", "0.025"))).exit_code, 0);
  const std::vector<float> plain = all_floats(final_checkpoint(base / "plain") / "model.safetensors");
  for (const std::string scale : {"0.5", "1"}) {
    std::vector<std::string> flags = sgd("0.5", "0.05");
    flags.insert(flags.end(), {"--sync", "diloco", "--inner-steps", "4", "--outer-lr", "1", "--outer-momentum", "0",
                               "--inner-lr-scale", scale});
    const fs::path run = base / ("scale" + scale);
    const ProcessResult r = run_process(tiny(run, flags));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double worst = largest_difference(plain, all_floats(final_checkpoint(run) / "model.safetensors"));
    std::cout << "inner lr scale " << scale << ": largest difference from plain training at lr 0.25 " << worst << "\n";
    if (scale == "0.5") EXPECT_LT(worst, 1e-5);
    else EXPECT_GT(worst, 1e-4);
  }
  const ProcessResult bad = run_process(tiny(base / "bad", {"--sync", "diloco", "--inner-lr-scale", "0"}));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--inner-lr-scale: must be > 0"), std::string::npos) << bad.output;
}

// Three workers through the faulty simulated folder with two fragments, overlapped by a step,
// int8 deltas (error feedback per fragment): every round carries about half the parameters,
// and the replicas end on the same θ_g, byte for byte.
TEST_F(DilocoTest, StreamingFragmentsThroughTheFolderSendAHalfEachAndEndIdentical) {
  const fs::path base = dir("fragments_cluster");
  // A long deadline floor: this test is about fragments, and a worker slowed 2 s by a loaded
  // machine must not be left out of the round (a clean-clone run saw it).
  run_cluster(base, {"--sync", "diloco", "--inner-steps", "4", "--fragments", "2", "--overlap-steps", "1", "--codec",
                     "int8", "--exchange", "all-gather", "--deadline-floor", "30"});
  const std::string model = read_bytes(final_checkpoint(base / "a") / "model.safetensors");
  ASSERT_FALSE(model.empty());
  for (const Worker& w : kWorkers)
    EXPECT_EQ(model, read_bytes(final_checkpoint(base / w.name) / "model.safetensors")) << w.name;
  const size_t parameters = all_floats(final_checkpoint(base / "a") / "model.safetensors").size();
  const std::vector<nlohmann::json> rounds = records(base / "a", "fragment");
  ASSERT_EQ(rounds.size(), static_cast<size_t>(kSteps / 2 + 1));
  for (const nlohmann::json& r : rounds) EXPECT_EQ(r["contributors"], 3) << r.dump();
  EXPECT_EQ(records(base / "a", "tokens").back()["tokens"], kSteps * (4 + 2 + 3) * 32) << "every token once";
  // The exchange counts them once too: status's bytes per token are per token trained.
  const ProcessResult status = run_process({kBinary, "status", "--shared", (base / "shared").string()});
  EXPECT_NE(status.output.find("for 5.76e+03 tokens"), std::string::npos) << status.output;  // 20 x 9 x 32
  EXPECT_NE(status.output.find("fragments=2 overlap=1"), std::string::npos) << status.output;
  // An int8 value is a byte (plus a scale per block and the files' headers); a whole delta
  // would be ~1 byte per parameter per round.
  const double bytes_per_round = exchange_stats(base / "a")["round_bytes_written"].get<double>() / rounds.size();
  std::cout << "fragments 2: " << bytes_per_round << " bytes written per round for " << parameters << " parameters\n";
  EXPECT_LT(bytes_per_round, 0.7 * static_cast<double>(parameters));
  EXPECT_GT(bytes_per_round, 0.3 * static_cast<double>(parameters));
  // And no round is the burst: the tied embedding, the model's largest tensor, is cut across
  // both fragments, so every round's upload is about half a delta (uncut, one fragment's
  // rounds uploaded 84 KB of these 135k parameters).
  double largest = 0;
  for (const nlohmann::json& r : rounds) largest = std::max(largest, r["bytes_written"].get<double>());
  std::cout << "fragments 2: largest round upload " << largest << " bytes\n";
  EXPECT_LT(largest, 0.6 * static_cast<double>(parameters));
  const std::vector<nlohmann::json> losses = records(base / "a", "round_loss");
  EXPECT_LT(losses.back()["round_loss"].get<double>(), losses.front()["round_loss"].get<double>());
}

TEST_F(DilocoTest, FragmentFlagsThatCannotScheduleAreRefused) {
  const fs::path base = dir("fragment_flags");
  ProcessResult r = run_process(tiny(base / "a", {"--fragments", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--fragments: only with --sync diloco"), std::string::npos) << r.output;
  r = run_process(tiny(base / "b", {"--sync", "diloco", "--inner-steps", "5", "--fragments", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("must divide --inner-steps"), std::string::npos) << r.output;
  r = run_process(tiny(base / "c", {"--sync", "diloco", "--inner-steps", "4", "--fragments", "2", "--overlap-steps", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--overlap-steps 2"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gradbox::testing
