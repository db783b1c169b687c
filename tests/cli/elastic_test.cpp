// Elastic runs in real processes (Note [Elastic membership] in src/exchange/folder_exchange.h):
// workers join a running job, leave it, die with kill -9 (also while publishing a checkpoint),
// all die and come back, and change hyperparameters live, through the cloud-folder simulator.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <thread>

#include "cli_fixture.h"
#include "process.h"

namespace gradbox::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Drive-like lag scaled down, with partial copies and lagging listings.
std::string folder_args(uint64_t seed, const std::string& extra = "") {
  return "--poll-ms 20 --sim-seed " + std::to_string(seed) +
         " --sim-delay-median-ms 40 --sim-delay-p90-ms 150 --sim-placeholder-prob 0.1 --sim-truncate-prob 0.1"
         " --sim-corrupt-prob 0.02 --sim-stale-list-prob 0.05 --sim-missing-prob 0.05 " + extra;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The status line of one worker (the table starts each line with the name).
std::string status_line(const std::string& status, const std::string& worker) {
  std::istringstream in(status);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(worker + " ")) return line;
  return "";
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

class ElasticTest : public CliTest {
 protected:
  struct Options {
    int steps = 30;
    std::string peers;        // founding members; empty: none given (a joiner)
    int micro_batch = 4;
    std::string sync_extra;   // more simulator flags for this worker
    std::vector<std::string> extra;
  };
  static Options with(int steps, std::string peers = "", std::vector<std::string> extra = {}) {
    Options o;
    o.steps = steps;
    o.peers = std::move(peers);
    o.extra = std::move(extra);
    return o;
  }

  // One worker of the run in `base`: its run folder is base/<name>, the shared folder base/shared.
  static std::vector<std::string> worker_argv(const fs::path& base, const std::string& name, const Options& o) {
    std::vector<std::string> argv =
        train(base / name, {"--block-size", "32", "--max-steps", std::to_string(o.steps), "--checkpoint-interval", "5",
                            "--log-interval", "5", "--dropout", "0", "--micro-batch", std::to_string(o.micro_batch),
                            "--local-workers", "3", "--shared", (base / "shared").string(), "--worker", name,
                            "--sync-backend", "sim", "--codec", "fp32",
                            // Deadlines scaled to a local folder: a dead worker costs ~1 s.
                            "--contribution-timeout", "3", "--deadline-floor", "1", "--failover-timeout", "6",
                            "--heartbeat-interval", "0.5", "--stale-after", "4", "--checkpoint-failover", "3",
                            "--checkpoint-part-bytes", "40000", "--fingerprint-interval", "5", "--give-up-timeout", "120"});
    if (!o.peers.empty()) argv.insert(argv.end(), {"--peers", o.peers});
    argv.insert(argv.end(), {"--sync-args", folder_args(std::hash<std::string>{}(name) % 1000 + 1, o.sync_extra)});
    argv.insert(argv.end(), o.extra.begin(), o.extra.end());
    return argv;
  }

  static pid_t start(const fs::path& base, const std::string& name, const Options& o) {
    fs::create_directories(base);
    static int generation = 0;
    return start_process(worker_argv(base, name, o), base / (name + "." + std::to_string(++generation) + ".log"));
  }

  static void kill_the_publisher_mid_checkpoint(const fs::path& base, const std::vector<std::string>& sync,
                                                int upload_mbps);
  static std::string logs(const fs::path& base, const std::string& name) {
    std::string out;
    for (const auto& entry : fs::directory_iterator(base))
      if (entry.path().filename().string().starts_with(name + ".") && entry.path().extension() == ".log")
        out += "--- " + entry.path().filename().string() + "\n" + read_bytes(entry.path());
    return out;
  }

  static fs::path final_checkpoint(const fs::path& run, int steps) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", steps);
    return run / "checkpoints" / name;
  }

  static std::string final_model(const fs::path& base, const std::string& name, int steps) {
    return read_bytes(final_checkpoint(base / name, steps) / "model.safetensors");
  }

  // The whole run dies: a and b killed with SIGKILL once a has applied `round`.
  static void kill_both_once_a_reaches(const fs::path& base, pid_t a, pid_t b, int round) {
    ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= round; })) << logs(base, "a");
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    EXPECT_EQ(wait_process(a), 128 + SIGKILL);
    EXPECT_EQ(wait_process(b), 128 + SIGKILL);
  }

  static std::vector<nlohmann::json> records(const fs::path& run, const char* key) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& r : read_metrics(run))
      if (r.contains(key)) out.push_back(r);
    return out;
  }
};

TEST_F(ElasticTest, AWorkerJoinsMidRunFromTheFolderCheckpointWithoutMakingOthersWait) {
  const fs::path base = dir("elastic_join");
  // A deadline floor of 3 s (the ceiling): on a loaded 2-core CI machine a member's upload can
  // be a second late, and this test counts every left-out contribution as the joiner's fault.
  Options o = with(36, "a,b", {"--deadline-floor", "3"});
  const pid_t a = start(base, "a", o);
  const pid_t b = start(base, "b", o);
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 12; })) << logs(base, "a");
  Options joiner = with(36, "", {"--deadline-floor", "3"});  // no --peers: it finds the run
  joiner.micro_batch = 3;
  const pid_t c = start(base, "c", joiner);
  ASSERT_EQ(wait_process(a), 0) << logs(base, "a");
  ASSERT_EQ(wait_process(b), 0) << logs(base, "b");
  ASSERT_EQ(wait_process(c), 0) << logs(base, "c");

  const std::string log_c = logs(base, "c");
  EXPECT_TRUE(contains(log_c, "joining run shared from the folder checkpoint of round")) << log_c;
  // b, a founding member, built a's initial weights itself (Note [Founders' own initial weights]).
  EXPECT_TRUE(contains(logs(base, "b"), "from this worker's own initial weights: a's are the same")) << logs(base, "b");
  const nlohmann::json ex_a = exchange_stats(base, "a"), ex_c = exchange_stats(base, "c");
  EXPECT_GE(ex_a["members_added"].get<int>() + exchange_stats(base, "b")["members_added"].get<int>(), 1) << ex_a.dump();
  // It caught up by replaying, then contributed to the rounds after.
  EXPECT_GE(ex_c["followed_rounds"].get<int>(), 1) << ex_c.dump();
  EXPECT_GE(ex_c["rounds"].get<int>() - ex_c["followed_rounds"].get<int>(), 8) << ex_c.dump();
  // Nobody ever waited out a deadline for the newcomer: every expected contribution came.
  EXPECT_EQ(ex_a["contributions_left_out"], 0) << ex_a.dump();
  EXPECT_EQ(ex_a["fingerprint_mismatches"], 0);
  const std::string model = final_model(base, "a", o.steps);
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(final_model(base, "b", o.steps), model);
  EXPECT_EQ(final_model(base, "c", o.steps), model);
}

TEST_F(ElasticTest, SigtermLeavesCleanlyAndTheOthersGoOn) {
  const fs::path base = dir("elastic_leave");
  Options o = with(24, "a,b,c");
  const pid_t a = start(base, "a", o);
  const pid_t b = start(base, "b", o);
  const pid_t c = start(base, "c", o);
  ASSERT_TRUE(wait_for([&] { return round_of(base, "b") >= 8; })) << logs(base, "b");
  kill(b, SIGTERM);
  EXPECT_EQ(wait_process(b), 0) << logs(base, "b");
  ASSERT_EQ(wait_process(a), 0) << logs(base, "a");
  ASSERT_EQ(wait_process(c), 0) << logs(base, "c");
  EXPECT_TRUE(contains(logs(base, "b"), "stopped at step")) << logs(base, "b");
  EXPECT_EQ(final_model(base, "a", o.steps), final_model(base, "c", o.steps));
  // The announced departure cost at most the round in flight.
  const nlohmann::json ex_a = exchange_stats(base, "a");
  EXPECT_LE(ex_a["contributions_left_out"].get<int>(), 1) << ex_a.dump();
  ProcessResult status = run_process({kBinary, "status", "--shared", (base / "shared").string()});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(contains(status_line(status.output, "b"), "left")) << status.output;
  EXPECT_TRUE(contains(status.output, "checkpoint: after round 24,")) << status.output;
}

TEST_F(ElasticTest, AllWorkersDieAndOneRestartResumesTheRun) {
  const fs::path base = dir("elastic_resume");
  Options o = with(26, "a,b");
  const pid_t a = start(base, "a", o);
  const pid_t b = start(base, "b", o);
  ASSERT_NO_FATAL_FAILURE(kill_both_once_a_reaches(base, a, b, 12));
  const pid_t b2 = start(base, "b", o);
  ASSERT_EQ(wait_process(b2), 0) << logs(base, "b");
  const std::string log_b = logs(base, "b");
  // It replayed what the folder kept, then went on alone once a's deadline passed.
  EXPECT_TRUE(contains(log_b, " members: b (")) << log_b;
  const std::vector<nlohmann::json> losses = records(base / "b", "loss");
  ASSERT_FALSE(losses.empty());
  EXPECT_EQ(losses.back()["step"], o.steps);
  for (const nlohmann::json& r : losses) EXPECT_TRUE(std::isfinite(r["loss"].get<double>())) << r.dump();
  EXPECT_FALSE(final_model(base, "b", o.steps).empty());
}

TEST_F(ElasticTest, AJoinerWithAnotherModelOrCodecIsRefused) {
  const fs::path base = dir("elastic_mismatch");
  Options o = with(400, "a");
  const pid_t a = start(base, "a", o);
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 2; })) << logs(base, "a");
  ProcessResult model = run_process(worker_argv(base, "d", with(30, "", {"--model", "llama-tiny"})));
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_TRUE(contains(model.output, "run/config-a-")) << model.output;
  EXPECT_TRUE(contains(model.output, "model")) << model.output;
  ProcessResult codec = run_process(worker_argv(base, "e", with(30, "", {"--codec", "int8"})));
  EXPECT_EQ(codec.exit_code, 2) << codec.output;
  EXPECT_TRUE(contains(codec.output, "--codec fp32")) << codec.output;
  EXPECT_TRUE(contains(codec.output, "this worker: int8")) << codec.output;
  // Nothing of theirs got into the run.
  EXPECT_FALSE(fs::exists(base / "shared" / "members" / "d"));
  kill(a, SIGTERM);
  EXPECT_EQ(wait_process(a), 0) << logs(base, "a");
  EXPECT_EQ(exchange_stats(base, "a")["rejected_files"], 0);
}

// The body of the publisher-killed tests: `sync` are the rounds' flags (a round per step).
void ElasticTest::kill_the_publisher_mid_checkpoint(const fs::path& base, const std::vector<std::string>& sync,
                                                    int upload_mbps) {
  // A checkpoint takes ~2 s to go up, time to kill its publisher.
  Options o = with(30, "a,b,c", sync);
  o.sync_extra = "--sim-bandwidth-mbps " + std::to_string(upload_mbps);
  const std::vector<std::string> names = {"a", "b", "c"};
  std::map<std::string, pid_t> pids;
  for (const std::string& name : names) pids[name] = start(base, name, o);
  // The agreed publisher of step 10 (epoch 0) is killed mid-write. Not a failover publisher: a
  // worker left out of a slow round and let back in may start an epoch-1 copy while the agreed
  // one is still uploading, and killing that one tests nothing.
  std::string victim;
  fs::path publishing;
  ASSERT_TRUE(wait_for([&] {
    for (const std::string& name : names) {
      const fs::path d = base / name / "sync" / "outbox" / "checkpoints" / ("s00000010-e0-" + name);
      if (fs::exists(d / "part-0000.gbx")) {
        victim = name;
        publishing = d;
        return true;
      }
    }
    return false;
  })) << logs(base, "a");
  const bool manifest_before_kill = fs::exists(publishing / "manifest.gbx");
  kill(pids[victim], SIGKILL);
  EXPECT_EQ(wait_process(pids[victim]), 128 + SIGKILL);
  pids.erase(victim);
  ASSERT_FALSE(manifest_before_kill) << "the kill came too late to test a half-written checkpoint";
  const std::string survivor = pids.begin()->first;
  ASSERT_TRUE(wait_for([&] { return round_of(base, survivor) >= 16; })) << logs(base, survivor);
  Options joiner = with(30, "", sync);
  pids["d"] = start(base, "d", joiner);
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);
  // Someone else published step 10, and the half-written one was never loaded.
  int failovers = 0;
  for (const auto& [name, pid] : pids) failovers += exchange_stats(base, name)["checkpoint_failovers"].get<int>();
  EXPECT_GE(failovers, 1) << logs(base, survivor) << logs(base, victim);
  const std::string log_d = logs(base, "d");
  EXPECT_TRUE(contains(log_d, "from the folder checkpoint of round")) << log_d;
  EXPECT_FALSE(contains(log_d, "(by " + victim + ")")) << log_d;
  const std::string model = final_model(base, survivor, o.steps);
  ASSERT_FALSE(model.empty());
  for (const auto& [name, pid] : pids) EXPECT_EQ(final_model(base, name, o.steps), model) << name;
}

// Checkpoints every 10 steps and a 2 s failover: the survivors' next local checkpoint (step 20)
// must not replace step 10's before its failover is due, or the folder simply gets step 20's
// and nothing is replaced. Every 5 steps with a 3 s failover, a CI run's rounds after the kill
// (~0.3 s each) got there first.
TEST_F(ElasticTest, ThePublisherKilledMidCheckpointIsReplacedAndJoinersLoadACompleteOne) {
  kill_the_publisher_mid_checkpoint(dir("elastic_publisher"),
                                    {"--codec", "fp16", "--checkpoint-interval", "10", "--checkpoint-failover", "2"},
                                    8);  // 1.6 MB
}

// The same in streaming DiLoCo rounds (two fragments, one a step): the checkpoint also holds θ_g
// and the outer momentum (2.7 MB, so a faster upload keeps the timing), and the joiner starts
// from θ_g. These steps are quicker: the next local checkpoint (step 15) would replace step 10's
// before a 3 s failover began, and the folder would simply get step 15's.
TEST_F(ElasticTest, StreamingDiLoCoPublisherKilledMidCheckpointIsReplacedAndJoinersLoadACompleteOne) {
  kill_the_publisher_mid_checkpoint(dir("elastic_publisher_diloco"),
                                    {"--codec", "fp16", "--sync", "diloco", "--inner-steps", "2", "--fragments", "2",
                                     "--checkpoint-failover", "1"},
                                    14);
}

TEST_F(ElasticTest, ALiveControlChangeIsAppliedAtTheSameRoundByAllAndSurvivesARestart) {
  const fs::path base = dir("elastic_control");
  Options o = with(24, "a,b,c");
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b", "c"}) pids[name] = start(base, name, o);
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 6; })) << logs(base, "a");
  write_text(base / "shared" / "control.json", R"({"lr_multiplier": 0.5, "micro_batch": 2})");
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);

  std::vector<int> steps;
  for (const std::string name : {"a", "b", "c"}) {
    const std::vector<nlohmann::json> changes = records(base / name, "control");
    ASSERT_EQ(changes.size(), 1u) << name << "\n" << logs(base, name);
    EXPECT_EQ(changes[0]["control"], nlohmann::json::parse(R"({"lr_multiplier": 0.5, "micro_batch": 2})"));
    steps.push_back(changes[0]["step"].get<int>());
    const nlohmann::json state = nlohmann::json::parse(read_bytes(final_checkpoint(base / name, o.steps) / "state.json"));
    EXPECT_EQ(state["control"]["micro_batch"], 2) << name;
  }
  EXPECT_EQ(steps[0], steps[1]);
  EXPECT_EQ(steps[0], steps[2]);
  EXPECT_GT(steps[0], 6);
  // The learning rate halved at that step (the cosine alone moves it by a few percent).
  std::map<int, double> lr;
  for (const nlohmann::json& r : records(base / "a", "lr")) lr[r["step"].get<int>()] = r["lr"].get<double>();
  ASSERT_TRUE(lr.count(steps[0]) && lr.count(steps[0] - 1));
  EXPECT_LT(lr[steps[0]], 0.6 * lr[steps[0] - 1]);
  EXPECT_GT(lr[steps[0] - 1], 0.9 * lr[steps[0] - 2]);
  EXPECT_EQ(final_model(base, "a", o.steps), final_model(base, "b", o.steps));
  EXPECT_EQ(final_model(base, "a", o.steps), final_model(base, "c", o.steps));

  // A restart of the finished run continues with the control it had.
  o.steps = 28;
  const pid_t again = start(base, "a", o);
  ASSERT_EQ(wait_process(again), 0) << logs(base, "a");
  EXPECT_TRUE(contains(logs(base, "a"), "live control from the checkpoint")) << logs(base, "a");
  const nlohmann::json state = nlohmann::json::parse(read_bytes(final_checkpoint(base / "a", 28) / "state.json"));
  EXPECT_EQ(state["control"], nlohmann::json::parse(R"({"lr_multiplier": 0.5, "micro_batch": 2})")) << logs(base, "a");
}

TEST_F(ElasticTest, ADivergedReplicaIsInTheMinorityAndReloadsTheAgreedState) {
  const fs::path base = dir("elastic_repair");
  Options o = with(25, "a,b,c");
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b"}) pids[name] = start(base, name, o);
  ::setenv("GRADBOX_FAULT_PERTURB_STEP", "7", 1);  // c's parameters drift after step 7
  pids["c"] = start(base, "c", o);
  ::unsetenv("GRADBOX_FAULT_PERTURB_STEP");
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);
  const std::string log_c = logs(base, "c");
  EXPECT_TRUE(contains(log_c, "parameters nudged after step 7")) << log_c;
  EXPECT_TRUE(contains(log_c, "in the minority; reloading the agreed state")) << log_c;
  EXPECT_GE(exchange_stats(base, "c")["resyncs"].get<int>(), 1);
  EXPECT_EQ(exchange_stats(base, "a")["resyncs"], 0);
  EXPECT_EQ(exchange_stats(base, "b")["resyncs"], 0);
  // Repaired: the three replicas end on the same parameters.
  const std::string model = final_model(base, "a", o.steps);
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(final_model(base, "b", o.steps), model);
  EXPECT_EQ(final_model(base, "c", o.steps), model);
}

// DiLoCo rounds (Note [DiLoCo rounds]) keep the elastic guarantees: a worker killed between two
// inner steps and one killed while its delta is on its way come back, a joiner loads the
// global parameters and outer momentum from the folder checkpoint, and every replica ends on
// the same bytes. Rounds are four steps here, so the run has 12; the joiner comes at round 5,
// well before the end even on a loaded machine.
TEST_F(ElasticTest, DilocoRoundsSurviveKillsInsideARoundAndWhilePublishingAndLetAJoinerIn) {
  const fs::path base = dir("elastic_diloco");
  const int steps = 48;
  Options o = with(steps, "a,b,c", {"--sync", "diloco", "--inner-steps", "4", "--exchange", "sharded", "--codec", "fp16"});
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b", "c"}) pids[name] = start(base, name, o);
  // c: killed right after an inner step that is not a round's last (its round is half done).
  auto last_step = [&](const std::string& name) {
    const std::vector<nlohmann::json> steps_done = records(base / name, "step");
    return steps_done.empty() ? 0 : steps_done.back()["step"].get<int>();
  };
  ASSERT_TRUE(wait_for([&] {
    const int s = last_step("c");
    return s >= 9 && s % 4 == 2;
  })) << logs(base, "c");
  kill(pids["c"], SIGKILL);
  EXPECT_EQ(wait_process(pids["c"]), 128 + SIGKILL);
  const int c_killed_at = last_step("c");
  // b: killed as soon as its delta for a round is in its outbox (published, not yet uploaded).
  int b_round = 0;
  ASSERT_TRUE(wait_for([&] {
    std::error_code ec;
    for (const auto& r : fs::directory_iterator(base / "b" / "sync" / "outbox" / "rounds", ec)) {
      const int round = std::stoi(r.path().filename().string().substr(1));
      if (round < 4) continue;
      for (const auto& f : fs::directory_iterator(r.path(), ec))
        if (f.path().filename().string().starts_with("g-b")) b_round = round;
    }
    return b_round > 0;
  })) << logs(base, "b");
  kill(pids["b"], SIGKILL);
  EXPECT_EQ(wait_process(pids["b"]), 128 + SIGKILL);
  std::cout << "diloco: c killed after step " << c_killed_at << ", b while publishing its delta of round " << b_round
            << "\n";
  pids["c"] = start(base, "c", o);
  pids["b"] = start(base, "b", o);
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 5; })) << logs(base, "a");
  pids["d"] = start(base, "d", with(steps, "", {"--sync", "diloco", "--inner-steps", "4", "--exchange", "sharded",
                                                "--codec", "fp16"}));
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);

  const std::string model = final_model(base, "a", steps);
  ASSERT_FALSE(model.empty());
  for (const std::string name : {"b", "c", "d"}) EXPECT_EQ(final_model(base, name, steps), model) << name;
  const std::string log_d = logs(base, "d");
  EXPECT_TRUE(contains(log_d, "from the folder checkpoint of round")) << log_d;
  for (const std::string name : {"a", "b", "c", "d"}) {
    const nlohmann::json ex = exchange_stats(base, name);
    EXPECT_EQ(ex["round"], steps / 4) << name << ": " << ex.dump();
    EXPECT_EQ(ex["rejected_files"], 0) << name << ": " << ex.dump();
    EXPECT_EQ(ex["fingerprint_mismatches"], 0) << name;
  }
  // Rounds kept their length: every applied outer round ended on a multiple of four steps.
  for (const nlohmann::json& r : records(base / "a", "round")) EXPECT_EQ(r["step"].get<int>() % 4, 0) << r.dump();
}

// A joiner during --sync-warmup-steps' per-step rounds starts from the warmed-up parameters:
// until the first DiLoCo round the run's state is the parameters, not θ_g (still the initial
// weights then). It once adopted θ_g, trained on from the initial weights unnoticed (the
// fingerprints compared θ_g too) and was repaired only after the first DiLoCo round.
TEST_F(ElasticTest, ADiLoCoJoinerDuringTheWarmUpStartsFromTheWarmedUpParameters) {
  const fs::path base = dir("elastic_warmup_join");
  const int warmup = 40, steps = 52;
  const std::vector<std::string> sync = {"--sync", "diloco", "--inner-steps", "4", "--sync-warmup-steps",
                                         std::to_string(warmup)};
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b"}) pids[name] = start(base, name, with(steps, "a,b", sync));
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 6; })) << logs(base, "a");
  pids["d"] = start(base, "d", with(steps, "", sync));
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);
  const std::string log_d = logs(base, "d");
  const size_t at = log_d.find("from the folder checkpoint of round ");
  ASSERT_NE(at, std::string::npos) << log_d;
  const int joined_at = std::stoi(log_d.substr(at + std::string("from the folder checkpoint of round ").size()));
  ASSERT_LT(joined_at, warmup) << "the joiner came after the warm-up: nothing tested\n" << log_d;
  for (const std::string name : {"a", "b", "d"}) {
    const nlohmann::json ex = exchange_stats(base, name);
    EXPECT_EQ(ex["fingerprint_mismatches"], 0) << name << ": " << ex.dump() << "\n" << logs(base, name);
    EXPECT_EQ(ex["resyncs"], 0) << name << ": " << ex.dump();
  }
  const std::string model = final_model(base, "a", steps);
  ASSERT_FALSE(model.empty());
  for (const std::string name : {"b", "d"}) EXPECT_EQ(final_model(base, name, steps), model) << name;
}

// Note [Late entry] with real processes: a joiner arriving during a time-boxed DiLoCo round
// (8 s boxes, more nominal steps than fit) computes the steps left in that round's box as a
// guest, and the round's average holds them: a shows that round with three contributors. The
// box is long enough for the joiner's start-up (torch, the checkpoint, the replay: ~3 s on a
// loaded CI machine) to leave it time: with 4 s boxes it once entered with one step left, and
// its delta came after the round was agreed.
TEST_F(ElasticTest, ATimeBoxedDiLoCoJoinerComputesInTheRoundInProgress) {
  const fs::path base = dir("late_entry");
  const int h = 8000, steps = 6 * h;
  const std::vector<std::string> sync = {"--sync", "diloco", "--inner-steps", std::to_string(h), "--round-seconds", "8",
                                         "--checkpoint-interval", std::to_string(h), "--log-interval", "100000"};
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b"}) pids[name] = start(base, name, with(steps, "a,b", sync));
  ASSERT_TRUE(wait_for([&] { return round_of(base, "a") >= 2; })) << logs(base, "a");
  pids["c"] = start(base, "c", with(steps, "", sync));
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);

  const std::string model = final_model(base, "a", steps);
  ASSERT_FALSE(model.empty());
  for (const std::string name : {"b", "c"}) EXPECT_EQ(final_model(base, name, steps), model) << name;
  std::map<int, nlohmann::json> a_rounds;
  for (const nlohmann::json& r : records(base / "a", "round")) a_rounds[r["round"].get<int>()] = r;
  int entered = 0, c_steps = 0;
  for (const nlohmann::json& r : records(base / "c", "round"))
    if (r["inner_steps"].get<int>() > 0) {
      entered = r["round"].get<int>();
      c_steps = r["inner_steps"].get<int>();
      break;
    }
  ASSERT_GT(entered, 2) << logs(base, "c");
  const std::string log_c = logs(base, "c");
  EXPECT_TRUE(contains(log_c, "round " + std::to_string(entered) + ": entered late with")) << log_c;
  ASSERT_TRUE(a_rounds.count(entered));
  const nlohmann::json& a_then = a_rounds[entered];
  std::cout << "late entry: c entered round " << entered << " with " << c_steps << " inner steps; a took "
            << a_then["inner_steps"] << ", waited " << a_then["wait_seconds"] << " s, contributors "
            << a_then["contributors"] << "\n";
  // Nobody waits for a guest (a joiner costs the others nothing), so its delta races the
  // members' to the owner; its box closes first and it wins unless the machine is loaded (one
  // clean-clone run of six saw it arrive after the agreement: its steps were lost, and it was a
  // contributor from a later round). Either way it computed in the round in progress, which the
  // log line above shows; when it lost the race a later round's average must hold it.
  if (a_then["contributors"] != 3) {
    std::cout << "c's delta came after round " << entered << " was agreed\n";
    bool later = false;
    for (const auto& [round, r] : a_rounds) later = later || (round > entered && r["contributors"] == 3);
    EXPECT_TRUE(later) << "c contributed to no round after it entered";
  }
  EXPECT_LE(c_steps, a_then["inner_steps"].get<int>() + 5) << "c had what was left of the round's box";
}

// Note [Partial deltas] with real processes: c, publishing its delta so far every 50 inner
// steps, is killed with SIGKILL in the middle of a box once one of those partials has landed in
// the shared folder. The owner of that round pins c's newest partial in its place: a and b
// apply it (the round shows a partial contributor), go on without c and end identical.
TEST_F(ElasticTest, AWorkerKilledMidBoxStillContributesItsPartialDelta) {
  const fs::path base = dir("partial_deltas");
  const int h = 8000, rounds = 6, steps = rounds * h;
  const std::vector<std::string> sync = {"--sync", "diloco", "--inner-steps", std::to_string(h), "--round-seconds", "4",
                                         "--overlap-steps", std::to_string(h - 1), "--partial-every", "50",
                                         "--failover-timeout", "8", "--checkpoint-interval", std::to_string(h),
                                         "--log-interval", "100000"};
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b", "c"}) pids[name] = start(base, name, with(steps, "a,b,c", sync));
  // A partial of round 2 or later that has landed (its .sent marker): then c dies mid-box.
  int partial_round = 0;
  ASSERT_TRUE(wait_for([&] {
    std::error_code ec;
    for (const auto& r : fs::directory_iterator(base / "c" / "sync" / "outbox" / "rounds", ec)) {
      const int round = std::stoi(r.path().filename().string().substr(1));
      if (round < 2) continue;
      bool whole = false, landed_partial = false;
      for (const auto& f : fs::directory_iterator(r.path(), ec)) {
        const std::string name = f.path().filename().string();
        whole |= name.starts_with("g-c");
        landed_partial |= name.starts_with("p-c") && name.ends_with(".sent");
      }
      if (landed_partial && !whole) partial_round = round;
    }
    return partial_round > 0;
  })) << logs(base, "c");
  kill(pids["c"], SIGKILL);
  EXPECT_EQ(wait_process(pids["c"]), 128 + SIGKILL);
  pids.erase("c");
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);

  const std::string model = final_model(base, "a", steps);
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(final_model(base, "b", steps), model);
  int salvaged_round = 0;
  for (const nlohmann::json& r : records(base / "a", "round"))
    if (r.value("partial_contributors", 0) > 0) salvaged_round = r["round"].get<int>();
  std::cout << "partial deltas: c killed mid-box in round " << partial_round << "; a's round " << salvaged_round
            << " held c's partial\n";
  EXPECT_EQ(salvaged_round, partial_round) << logs(base, "a");
  const uint64_t salvaged = exchange_stats(base, "a").value("partials_salvaged", 0ull) +
                            exchange_stats(base, "b").value("partials_salvaged", 0ull);
  EXPECT_EQ(salvaged, 1u);
  for (const std::string name : {"a", "b"}) {
    const nlohmann::json ex = exchange_stats(base, name);
    EXPECT_EQ(ex["round"], rounds) << name << ": " << ex.dump();
    EXPECT_EQ(ex["rejected_files"], 0) << name << ": " << ex.dump();
  }
}

TEST_F(ElasticTest, AllDiLoCoWorkersDieAndOneRestartResumesTheRun) {
  const fs::path base = dir("elastic_diloco_resume");
  Options o = with(32, "a,b", {"--sync", "diloco", "--inner-steps", "4"});
  const pid_t a = start(base, "a", o);
  const pid_t b = start(base, "b", o);
  ASSERT_NO_FATAL_FAILURE(kill_both_once_a_reaches(base, a, b, 3));
  const pid_t b2 = start(base, "b", o);
  ASSERT_EQ(wait_process(b2), 0) << logs(base, "b");
  const std::string log_b = logs(base, "b");
  EXPECT_EQ(exchange_stats(base, "b")["round"], 8);
  // Killed before its round-3 contribution went up, b is no member of round 4: it resumes the
  // run alone once a is stale, and the round it only followed moves nothing (no outer step on
  // an empty delta), unless its round-4 contribution had gone up before the kill (a loaded
  // machine): then it reuses it. Killed after its round-3 contribution went up, b is a member
  // and takes round 4 over from its dead owner.
  if (contains(log_b, "b resumes the run alone")) {
    EXPECT_TRUE(contains(log_b, ": nobody contributed; every replica goes back to the round's start") ||
                contains(log_b, "reusing the contribution this worker published before it restarted"))
        << log_b;
  } else {
    EXPECT_TRUE(contains(log_b, "b takes over as epoch 1 owner")) << log_b;
  }
  for (const nlohmann::json& r : records(base / "b", "round_loss")) {
    if (r["round_tokens"].get<int>() > 0) {
      EXPECT_TRUE(std::isfinite(r["round_loss"].get<double>())) << r.dump();
    }
  }
  EXPECT_FALSE(final_model(base, "b", o.steps).empty());
}

// The chaos test: four workers, one killed with SIGKILL every few rounds and restarted after a
// pause. Longer runs: scripts/chaos.sh (CHAOS_ROUNDS, CHAOS_KILL_EVERY, CHAOS_SEED).
TEST_F(ElasticTest, ChaosRandomKillsAndRestartsKeepReplicasIdenticalAndTraining) {
  const int rounds = env_int("CHAOS_ROUNDS", 40);
  const int kill_every = env_int("CHAOS_KILL_EVERY", 8);
  std::mt19937 rng(static_cast<uint32_t>(env_int("CHAOS_SEED", 7)));
  const std::vector<std::string> names = {"a", "b", "c", "d"};
  const fs::path base = dir("elastic_chaos");
  Options o = with(rounds, "a,b,c,d", {"--exchange", "sharded", "--codec", "fp16"});
  std::map<std::string, pid_t> pids;
  for (const std::string& name : names) pids[name] = start(base, name, o);
  int kills = 0;
  for (int next = kill_every; next + 6 < rounds; next += kill_every) {
    if (!wait_for([&] { return round_of(base, "a") >= next || round_of(base, "b") >= next; })) break;
    const std::string victim = names[rng() % names.size()];
    kill(pids[victim], SIGKILL);
    EXPECT_EQ(wait_process(pids[victim]), 128 + SIGKILL) << logs(base, victim);
    ++kills;
    std::cout << "chaos: killed " << victim << " near round " << next << "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    pids[victim] = start(base, victim, o);
  }
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << logs(base, name);
  ASSERT_GE(kills, 2);

  // Every replica ends on the same parameters, and no loss was NaN.
  const std::string model = final_model(base, "a", rounds);
  ASSERT_FALSE(model.empty());
  int partial_copies = 0;
  for (const std::string& name : names) {
    EXPECT_EQ(final_model(base, name, rounds), model) << name;
    for (const nlohmann::json& r : records(base / name, "loss"))
      EXPECT_TRUE(std::isfinite(r["loss"].get<double>())) << name << " " << r.dump();
    // No partial file was read: copies were verified (and some were partial), none rejected, by
    // any life of the worker (Note [Counters across lives]).
    const nlohmann::json ex = exchange_stats(base, name);
    EXPECT_EQ(ex["all_lives"]["rejected_files"], 0) << name << ": " << ex.dump();
    const nlohmann::json sync = nlohmann::json::parse(read_bytes(base / name / "sync" / "syncer" / "stats.json"));
    EXPECT_EQ(sync["quarantined"], 0) << name << ": " << sync.dump();
    partial_copies += sync["incomplete_seen"].get<int>() + sync["placeholders_seen"].get<int>();
  }
  EXPECT_GT(partial_copies, 0) << "the folder should have shown partial copies (and they were not used)";

  // The same rounds without faults, from the same start: the loss is within tolerance.
  const fs::path calm = dir("elastic_calm");
  std::map<std::string, pid_t> calm_pids;
  for (const std::string& name : names) calm_pids[name] = start(calm, name, o);
  for (const auto& [name, pid] : calm_pids) ASSERT_EQ(wait_process(pid), 0) << logs(calm, name);
  auto tail_loss = [](const fs::path& run) {
    std::vector<double> last;
    for (const nlohmann::json& r : read_metrics(run))
      if (r.contains("loss")) last.push_back(r["loss"].get<double>());
    double sum = 0;
    const size_t n = std::min<size_t>(5, last.size());
    for (size_t i = last.size() - n; i < last.size(); ++i) sum += last[i];
    return sum / static_cast<double>(n);
  };
  const double chaos_loss = tail_loss(base / "a"), calm_loss = tail_loss(calm / "a");
  std::cout << "chaos: " << kills << " kills in " << rounds << " rounds; mean loss of the last 5 rounds " << chaos_loss
            << " vs " << calm_loss << " without faults\n";
  EXPECT_LT(std::abs(chaos_loss - calm_loss), 0.1 * calm_loss);
}

}  // namespace
}  // namespace gradbox::testing
