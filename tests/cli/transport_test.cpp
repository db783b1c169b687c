// `gradbox train --transport c10d` in real processes: Gloo on the loopback interface, the group's
// store in the shared folder. Checked against one process training on the union of the workers'
// batches (--emulate-workers, whose arithmetic the folder transport reproduces bit for bit), and
// with a worker killed by SIGKILL mid-run.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "process.h"

namespace gradbox::testing {
namespace {

struct Worker {
  std::string name;
  int micro_batch;
};

class TransportTest : public CliTest {
 protected:
  static std::vector<std::string> tiny(const fs::path& out, int steps) {
    return train(out, {"--block-size", "32", "--max-steps", std::to_string(steps), "--checkpoint-interval", "0",
                       "--log-interval", "10", "--dropout", "0"});
  }

  // Starts the workers on base/shared over c10d; optionally kills one once its log shows `kill_at`.
  static std::map<std::string, int> run_c10d(const fs::path& base, const std::vector<Worker>& workers, int steps,
                                             std::vector<std::string> extra = {}, const std::string& kill_worker = "",
                                             const std::string& kill_at = "") {
    std::string peers;
    for (const Worker& w : workers) peers += (peers.empty() ? "" : ",") + w.name;
    std::map<std::string, pid_t> pids;
    fs::create_directories(base / "shared");
    for (const Worker& w : workers) {
      std::vector<std::string> argv = tiny(base / w.name, steps);
      std::vector<std::string> more = {"--micro-batch", std::to_string(w.micro_batch), "--shared",
                                       (base / "shared").string(), "--worker", w.name, "--peers", peers,
                                       "--transport", "c10d", "--c10d-interface", "lo", "--c10d-stale-after", "3"};
      argv.insert(argv.end(), more.begin(), more.end());
      argv.insert(argv.end(), extra.begin(), extra.end());
      pids[w.name] = start_process(argv, base / (w.name + ".log"));
    }
    if (!kill_worker.empty()) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (std::chrono::steady_clock::now() < deadline &&
             !contains(read_bytes(base / (kill_worker + ".log")), kill_at))
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      kill(pids[kill_worker], SIGKILL);
    }
    std::map<std::string, int> codes;
    for (const auto& [name, pid] : pids) codes[name] = wait_process(pid);
    return codes;
  }

  // Trains one process on the union of the workers' batches (--emulate-workers: the folder
  // transport's arithmetic, bit for bit) and returns the largest per-step loss difference of
  // `run` from it.
  static double worst_difference_from_union(const fs::path& base, const fs::path& run, int steps,
                                            const std::string& workers) {
    ProcessResult r = run_process([&] {
      std::vector<std::string> argv = tiny(base / "union", steps);
      argv.insert(argv.end(), {"--emulate-workers", workers});
      return argv;
    }());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> cluster = losses(run), single = losses(base / "union");
    EXPECT_EQ(cluster.size(), single.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(cluster.size(), single.size()); ++i)
      worst = std::max(worst, std::abs(cluster[i] - single[i]));
    EXPECT_LT(single.back(), single.front() - 0.3);  // and it learned
    return worst;
  }
};

TEST_F(TransportTest, C10dReplicasAreIdenticalAndTrackTheFolderArithmetic) {
  const fs::path base = dir("c10d_parity");
  const int steps = 30;
  const std::vector<Worker> workers = {{"a", 4}, {"b", 2}, {"c", 3}};
  // Small buckets, so that each round is many all-reduces started as backward finishes them.
  for (const auto& [name, code] : run_c10d(base, workers, steps, {"--c10d-bucket-mb", "0.02"}))
    ASSERT_EQ(code, 0) << name << "\n" << read_bytes(base / (name + ".log"));
  for (const auto& entry : fs::directory_iterator(base / "shared" / "c10d" / "status"))
    EXPECT_EQ(nlohmann::json::parse(read_bytes(entry.path()))["rounds_streamed"].get<int>(), steps) << entry.path();
  const std::string model_a = read_bytes(final_checkpoint(base / "a", steps) / "model.safetensors");
  ASSERT_FALSE(model_a.empty());
  for (const Worker& w : workers) {
    EXPECT_EQ(read_bytes(final_checkpoint(base / w.name, steps) / "model.safetensors"), model_a) << w.name;
    EXPECT_TRUE(contains(read_bytes(base / (w.name + ".log")), "every replica of group epoch 0 holds the same parameters"));
  }
  // c10d sums in another order than the union, so the curves agree to fp32 rounding, amplified a
  // little by 30 steps of Adam.
  const double worst = worst_difference_from_union(base, base / "a", steps, "a:4,b:2,c:3");
  std::cout << "c10d vs the folder's arithmetic (fp32 union): largest per-step loss difference " << worst << "\n";
  EXPECT_LT(worst, 1e-3);
}

TEST_F(TransportTest, AWorkerKilledMidRunLeavesTheOthersTrainingWithoutARestart) {
  const fs::path base = dir("c10d_kill");
  const int steps = 150;
  const std::vector<Worker> workers = {{"a", 4}, {"b", 2}, {"c", 3}};
  const auto codes = run_c10d(base, workers, steps, {}, "c", "step 20/");
  EXPECT_EQ(codes.at("c"), 128 + SIGKILL);
  for (const std::string name : {"a", "b"}) {
    ASSERT_EQ(codes.at(name), 0) << name << "\n" << read_bytes(base / (name + ".log"));
    const std::string log = read_bytes(base / (name + ".log"));
    EXPECT_TRUE(contains(log, "group epoch 1: a,b")) << log;
    EXPECT_TRUE(contains(log, ": redone in group epoch 1") || contains(log, ": completed from the data")) << log;
  }
  EXPECT_EQ(read_bytes(final_checkpoint(base / "a", steps) / "model.safetensors"),
            read_bytes(final_checkpoint(base / "b", steps) / "model.safetensors"));
  // `gradbox status` shows the group that went on, and what it took.
  ProcessResult status = run_process({kBinary, "status", "--shared", (base / "shared").string()});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(contains(status.output, "run shared: gloo, group epoch 1: a,b")) << status.output;
  EXPECT_TRUE(contains(status.output, "left")) << status.output;
}

TEST_F(TransportTest, AJoinerEntersAtTheGroupsNextCheckpointAndEndsIdentical) {
  const fs::path base = dir("c10d_join");
  const int steps = 200;
  fs::create_directories(base / "shared");
  auto start = [&](const std::string& name, const std::string& peers) {
    std::vector<std::string> argv = tiny(base / name, steps);
    std::vector<std::string> more = {"--shared", (base / "shared").string(), "--worker", name, "--peers", peers,
                                     "--transport", "c10d", "--c10d-interface", "lo", "--checkpoint-interval", "20"};
    argv.insert(argv.end(), more.begin(), more.end());
    return start_process(argv, base / (name + ".log"));
  };
  std::map<std::string, pid_t> pids{{"a", start("a", "a,b")}, {"b", start("b", "a,b")}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && !contains(read_bytes(base / "a.log"), "group epoch 0: a,b"))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pids["c"] = start("c", "a,b");  // not a founder: it joins the running group
  for (const auto& [name, pid] : pids) ASSERT_EQ(wait_process(pid), 0) << name << "\n" << read_bytes(base / (name + ".log"));
  const std::string log_a = read_bytes(base / "a.log"), log_c = read_bytes(base / "c.log");
  EXPECT_TRUE(contains(log_a, "admitting ")) << log_a;
  EXPECT_TRUE(contains(log_a, "group epoch 1: a,b,c")) << log_a;
  EXPECT_TRUE(contains(log_c, "joined run")) << log_c;
  const std::string model_a = read_bytes(final_checkpoint(base / "a", steps) / "model.safetensors");
  ASSERT_FALSE(model_a.empty());
  for (const std::string name : {"b", "c"})
    EXPECT_EQ(read_bytes(final_checkpoint(base / name, steps) / "model.safetensors"), model_a) << name;
  // c trained only from its admission on (a multiple of 20), and no member restarted.
  const std::vector<nlohmann::json> c_metrics = read_metrics(base / "c");
  ASSERT_FALSE(c_metrics.empty());
  const int first_c_step = c_metrics.front()["step"].get<int>();
  EXPECT_GT(first_c_step, 20);
  EXPECT_EQ((first_c_step - 1) % 20, 0) << first_c_step;
  EXPECT_EQ(read_metrics(base / "a").front()["step"].get<int>(), 1);
}

TEST_F(TransportTest, DilocoRoundsGoOverC10dToo) {
  const fs::path base = dir("c10d_diloco");
  const int steps = 20;
  const std::vector<Worker> workers = {{"a", 4}, {"b", 2}};
  for (const auto& [name, code] : run_c10d(base, workers, steps, {"--sync", "diloco", "--inner-steps", "5"}))
    ASSERT_EQ(code, 0) << name << "\n" << read_bytes(base / (name + ".log"));
  EXPECT_EQ(read_bytes(final_checkpoint(base / "a", steps) / "model.safetensors"),
            read_bytes(final_checkpoint(base / "b", steps) / "model.safetensors"));
  const std::vector<double> curve = losses(base / "a");
  ASSERT_FALSE(curve.empty());
  EXPECT_LT(curve.back(), curve.front() - 0.3);
}

TEST_F(TransportTest, ADilocoWorkerKilledDuringInnerStepsIsLeftOutBetweenRounds) {
  // c dies in the middle of a round's inner steps. a and b are busy with theirs: whichever
  // reaches the round's end first finds c gone (its heartbeat stale) and forms the next epoch;
  // the other enters it between two inner steps (NetworkExchange::between_rounds) or at the
  // round's barrier, and the run goes on without c.
  const fs::path base = dir("c10d_diloco_kill");
  const int steps = 60;
  const std::vector<Worker> workers = {{"a", 4}, {"b", 2}, {"c", 3}};
  const auto codes = run_c10d(base, workers, steps, {"--sync", "diloco", "--inner-steps", "10"}, "c", "step 20/");
  EXPECT_EQ(codes.at("c"), 128 + SIGKILL);
  for (const std::string name : {"a", "b"}) {
    ASSERT_EQ(codes.at(name), 0) << name << "\n" << read_bytes(base / (name + ".log"));
    EXPECT_TRUE(contains(read_bytes(base / (name + ".log")), "group epoch 1: a,b")) << read_bytes(base / (name + ".log"));
  }
  EXPECT_EQ(read_bytes(final_checkpoint(base / "a", steps) / "model.safetensors"),
            read_bytes(final_checkpoint(base / "b", steps) / "model.safetensors"));
}

// Two groups of two, each averaging over c10d, the groups meeting through the cloud-folder
// simulator (lag and faults on) as one worker each.
class HybridTest : public TransportTest {
 protected:
  struct Member {
    std::string name, group;
    int micro_batch;
  };
  static inline const std::vector<Member> kMembers = {{"a1", "ga", 4}, {"a2", "ga", 2}, {"b1", "gb", 3}, {"b2", "gb", 1}};

  static std::map<std::string, pid_t> start_hybrid(const fs::path& base, int steps, const std::vector<std::string>& extra) {
    std::map<std::string, pid_t> pids;
    fs::create_directories(base / "shared");
    for (const Member& m : kMembers) {
      std::vector<std::string> argv = tiny(base / m.name, steps);
      std::vector<std::string> more = {
          "--micro-batch", std::to_string(m.micro_batch), "--shared", (base / "shared").string(), "--worker", m.name,
          "--peers", "a1,b1", "--codec", "fp32", "--transport", "hybrid", "--c10d-group", m.group,
          "--c10d-group-peers", m.group == "ga" ? "a1,a2" : "b1,b2", "--c10d-store", (base / m.group).string(),
          "--c10d-interface", "lo", "--c10d-stale-after", "2"};
      argv.insert(argv.end(), more.begin(), more.end());
      argv.insert(argv.end(), extra.begin(), extra.end());
      pids[m.name] = start_process(argv, base / (m.name + ".log"));
    }
    return pids;
  }
};

TEST_F(HybridTest, TwoGroupsOfTwoThroughASimulatedFolderTrackTheUnion) {
  const fs::path base = dir("hybrid_parity");
  const int steps = 20;
  const std::string sim = "--poll-ms 20 --sim-seed 7 --sim-delay-median-ms 50 --sim-delay-p90-ms 200 "
                          "--sim-placeholder-prob 0.2 --sim-truncate-prob 0.2 --sim-corrupt-prob 0.05 "
                          "--sim-stale-list-prob 0.1 --sim-missing-prob 0.1 --sim-duplicate-prob 0.1";
  for (const auto& [name, pid] : start_hybrid(base, steps, {"--sync-backend", "sim", "--sync-args", sim,
                                                            "--deadline-floor", "30"}))
    ASSERT_EQ(wait_process(pid), 0) << name << "\n" << read_bytes(base / (name + ".log"));
  const std::string model = read_bytes(final_checkpoint(base / "a1", steps) / "model.safetensors");
  ASSERT_FALSE(model.empty());
  for (const Member& m : kMembers)
    EXPECT_EQ(read_bytes(final_checkpoint(base / m.name, steps) / "model.safetensors"), model) << m.name;
  // Only the leaders were in the folder: one contribution per group per round.
  EXPECT_TRUE(contains(read_bytes(base / "a1.log"), "leading group ga in the shared folder"));
  EXPECT_FALSE(fs::exists(base / "a2" / "sync"));
  // Group averages weighted by group tokens are the average over all four workers.
  const double worst = worst_difference_from_union(base, base / "b2", steps, "a1:4,a2:2,b1:3,b2:1");
  std::cout << "hybrid (2 groups of 2) vs the fp32 union: largest per-step loss difference " << worst << "\n";
  EXPECT_LT(worst, 1e-3);
}

TEST_F(HybridTest, WhenALeaderDiesTheNextMemberLeadsItsGroupInTheFolder) {
  const fs::path base = dir("hybrid_leader");
  const int steps = 80;
  auto pids = start_hybrid(base, steps, {"--sync-backend", "mounted", "--sync-args", "--poll-ms 20", "--stale-after",
                                         "15", "--contribution-timeout", "5", "--failover-timeout", "8"});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && !contains(read_bytes(base / "a1.log"), "step 20/"))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pids["a1"], SIGKILL);
  EXPECT_EQ(wait_process(pids["a1"]), 128 + SIGKILL);
  for (const std::string name : {"a2", "b1", "b2"})
    ASSERT_EQ(wait_process(pids[name]), 0) << name << "\n" << read_bytes(base / (name + ".log"));
  EXPECT_TRUE(contains(read_bytes(base / "a2.log"), "now leading group ga in the shared folder")) << read_bytes(base / "a2.log");
  const std::string model = read_bytes(final_checkpoint(base / "b1", steps) / "model.safetensors");
  ASSERT_FALSE(model.empty());
  for (const std::string name : {"a2", "b2"})
    EXPECT_EQ(read_bytes(final_checkpoint(base / name, steps) / "model.safetensors"), model) << name;
}

TEST_F(TransportTest, MembersThatDisagreeOnOverlappingBackwardStopWithAClearError) {
  // b sends its rounds whole, a streams them with backward: their buckets differ, and summing
  // them would mix unrelated bytes; both stop at the first round and say why.
  const fs::path base = dir("c10d_disagree");
  fs::create_directories(base / "shared");
  std::map<std::string, pid_t> pids;
  for (const std::string name : {"a", "b"}) {
    std::vector<std::string> argv = tiny(base / name, 5);
    argv.insert(argv.end(), {"--shared", (base / "shared").string(), "--worker", name, "--peers", "a,b", "--transport",
                             "c10d", "--c10d-interface", "lo", "--c10d-overlap-backward", name == "a" ? "true" : "false"});
    pids[name] = start_process(argv, base / (name + ".log"));
  }
  for (const auto& [name, pid] : pids) {
    EXPECT_NE(wait_process(pid), 0) << name;
    EXPECT_TRUE(contains(read_bytes(base / (name + ".log")), "split round 1 into different buckets"))
        << read_bytes(base / (name + ".log"));
  }
}

TEST_F(TransportTest, BadTransportFlagsAreRefusedByName) {
  const fs::path shared = dir("c10d_bad_shared");
  fs::create_directories(shared);
  ProcessResult r = run_process(train(dir("c10d_bad1"), {"--shared", shared.string(), "--worker", "a", "--transport", "carrier-pigeon"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--transport carrier-pigeon: folder, c10d or hybrid")) << r.output;
  r = run_process(train(dir("c10d_bad2"), {"--shared", shared.string(), "--worker", "a", "--transport", "c10d",
                                           "--c10d-backend", "nccl", "--device", "cpu"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--c10d-backend nccl: needs --device cuda")) << r.output;
  r = run_process(train(dir("c10d_bad3"), {"--shared", shared.string(), "--worker", "a", "--transport", "hybrid"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--transport hybrid: --c10d-group NAME is required")) << r.output;
  r = run_process(train(dir("c10d_bad4"), {"--shared", shared.string(), "--worker", "a", "--transport", "c10d",
                                           "--c10d-bucket-mb", "0"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--c10d-bucket-mb 0: expected more than 0")) << r.output;
}

}  // namespace
}  // namespace gradbox::testing
