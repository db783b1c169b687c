// Real gradbox-sync processes over one true folder: convergence under simulated faults, kill -9
// and restart, --parent-pid, signals and bad flags.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "../cli/process.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "test_util.h"
#include "wire/envelope.h"

namespace gradbox::syncer {
namespace {

using namespace testing;
using gradbox::testing::run_process;
using gradbox::testing::start_process;
using gradbox::testing::wait_process;
using Clock = std::chrono::steady_clock;

const std::string kSync = GRADBOX_SYNC_BINARY;

std::vector<std::string> sim_args(const fs::path& truth, const fs::path& root, const std::string& w) {
  return {kSync, "--backend", "sim", "--shared", truth.string(), "--local", (root / w).string(), "--worker", w,
          "--poll-ms", "40", "--jobs", "2", "--max-attempts", "100", "--log-level", "warn",
          "--sim-seed", "11", "--sim-delay-median-ms", "50", "--sim-delay-p90-ms", "300",
          "--sim-placeholder-prob", "0.3", "--sim-truncate-prob", "0.2", "--sim-corrupt-prob", "0.2",
          "--sim-stale-list-prob", "0.2", "--sim-missing-prob", "0.1", "--sim-duplicate-prob", "0.1",
          "--sim-log", (root / (w + "_faults.jsonl")).string()};
}

// Every peer file flagged and verifying complete in w's inbox. A file may sit under its final name
// a moment before its .flag (rename, then flag), but it must already verify complete.
bool converged(const fs::path& local, size_t peer_files) {
  size_t flagged = 0;
  for (const auto& rel : files_under(local / kInboxDir)) {
    if (rel.find(kTempMarker) != std::string::npos || rel.ends_with(kFlagSuffix)) continue;
    if (wire::verify_file(local / kInboxDir / rel).state != wire::FileState::complete) {
      ADD_FAILURE() << rel << " under its final name does not verify";
      return false;
    }
    if (fs::exists(local / kInboxDir / flag_of(rel))) ++flagged;
  }
  return flagged == peer_files;
}

nlohmann::json stats_of(const fs::path& local) {
  return nlohmann::json::parse(read_file(local / kSyncerStatsFile));
}

void publish(const fs::path& local, const std::string& w, int count) {
  for (int i = 0; i < count; ++i) {
    fs::create_directories(local / kOutboxDir / str("round_", i % 4));
    write_file_atomic(local / kOutboxDir / str("round_", i % 4) / str(w, "_", i, ".bin"),
                      framed_file(std::hash<std::string>{}(w) + i, 500 + 131 * i));
  }
}

void expect_shared_intact(const fs::path& truth, const std::vector<std::string>& workers, int count) {
  for (const auto& w : workers)
    for (int i = 0; i < count; ++i) {
      fs::path p = truth / str("round_", i % 4) / str(w, "_", i, ".bin");
      EXPECT_EQ(read_file(p), framed_file(std::hash<std::string>{}(w) + i, 500 + 131 * i)) << p;
    }
}

bool wait_until(const std::function<bool()>& done, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

TEST(SyncerProcess, ThreeWorkersConvergeUnderSimulatedFaults) {
  fs::path root = fresh_dir("proc3"), truth = root / "true";
  fs::create_directories(truth);
  const std::vector<std::string> workers{"a", "b", "c"};
  std::map<std::string, pid_t> pids;
  for (const auto& w : workers) pids[w] = start_process(sim_args(truth, root, w), root / (w + ".log"));
  for (const auto& w : workers) publish(root / w, w, 10);
  bool ok = wait_until([&] {
    for (const auto& w : workers)
      if (!converged(root / w, 20)) return false;
    return true;
  }, 25);
  for (const auto& w : workers) {
    ::kill(pids[w], SIGTERM);
    EXPECT_EQ(wait_process(pids[w]), 0) << w << ": " << read_file(root / (w + ".log"));
  }
  ASSERT_TRUE(ok) << "workers did not converge";
  uint64_t faults = 0;
  for (const auto& w : workers) {
    auto s = stats_of(root / w);
    EXPECT_EQ(s["flagged"], 20) << w;
    EXPECT_EQ(s["uploaded"], 10) << w;
    EXPECT_EQ(s["quarantined"], 0) << w;
    for (auto& [kind, n] : s["sim_faults"].items()) faults += n.get<uint64_t>();
  }
  EXPECT_GT(faults, 0u);
  expect_shared_intact(truth, workers, 10);
}

TEST(SyncerProcess, KillNineAndRestartConverges) {
  fs::path root = fresh_dir("kill9"), truth = root / "true";
  fs::create_directories(truth);
  const std::vector<std::string> workers{"a", "b"};
  pid_t a = start_process(sim_args(truth, root, "a"), root / "a.log");
  pid_t b = start_process(sim_args(truth, root, "b"), root / "b.log");
  publish(root / "a", "a", 10);
  publish(root / "b", "b", 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // mid-run, on purpose
  ::kill(b, SIGKILL);
  EXPECT_EQ(wait_process(b), 128 + SIGKILL);
  b = start_process(sim_args(truth, root, "b"), root / "b2.log");
  bool ok = wait_until([&] { return converged(root / "a", 10) && converged(root / "b", 10); }, 25);
  ::kill(a, SIGTERM);
  ::kill(b, SIGTERM);
  EXPECT_EQ(wait_process(a), 0);
  EXPECT_EQ(wait_process(b), 0);
  ASSERT_TRUE(ok) << read_file(root / "b2.log");
  expect_shared_intact(truth, workers, 10);  // nothing overwritten by the restarted syncer
  EXPECT_EQ(files_under(truth).size(), 20u);
  EXPECT_EQ(stats_of(root / "b")["upload_conflicts"], 0);
}

// Note [Waking on changes]: two syncers on a local shared folder that poll once an hour still
// move a round's files at once: a worker's publish wakes its syncer to upload, the upload wakes
// the peer's to download and flag, a worker's request wakes its syncer to fetch an on-demand
// file, and a withdrawn file is deleted from the shared folder. Only the first poll (at start)
// and change events can do any of it.
TEST(SyncerProcess, ChangesWakeASyncerThatPollsOnceAnHour) {
  const fs::path root = fresh_dir("wake"), shared = root / "shared";
  fs::create_directories(shared);
  const auto args = [&](const std::string& w) {
    return std::vector<std::string>{kSync, "--shared", shared.string(), "--local", (root / w).string(), "--worker", w,
                                    "--poll-ms", "3600000", "--on-demand-prefix", std::string(kContributionPrefix),
                                    "--log-level", "warn"};
  };
  pid_t a = start_process(args("a"), root / "a.log");
  pid_t b = start_process(args("b"), root / "b.log");
  ASSERT_TRUE(wait_until([&] { return fs::exists(root / "a" / kSyncerStatsFile) && fs::exists(root / "b" / kSyncerStatsFile); }, 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past both first polls

  // a publishes a round file: up through a's syncer, down through b's, flagged.
  const std::string heartbeat = "r00000001/hb-a.gbx", contribution = "r00000001/" + std::string(kContributionPrefix) + "a-s0.gbx";
  fs::create_directories(root / "a" / kOutboxDir / "r00000001");
  write_file_atomic(root / "a" / kOutboxDir / heartbeat, framed_file(21));
  write_file_atomic(root / "a" / kOutboxDir / contribution, framed_file(22, 5000));
  EXPECT_TRUE(wait_until([&] { return fs::exists(root / "b" / kInboxDir / flag_of(heartbeat)); }, 20)) << read_file(root / "b.log");
  EXPECT_EQ(read_file(root / "b" / kInboxDir / heartbeat), framed_file(21));
  // The contribution is on demand: it waits in the shared folder until b asks for it.
  EXPECT_TRUE(wait_until([&] { return fs::exists(shared / contribution); }, 20));
  EXPECT_FALSE(fs::exists(root / "b" / kInboxDir / contribution));
  write_bytes(root / "b" / kRequestsDir / contribution, "");
  EXPECT_TRUE(wait_until([&] { return fs::exists(root / "b" / kInboxDir / flag_of(contribution)); }, 20)) << read_file(root / "b.log");

  // a withdraws its heartbeat: its syncer deletes the shared copy.
  ASSERT_TRUE(wait_until([&] { return fs::exists(root / "a" / kOutboxDir / sent_of(heartbeat)); }, 20));
  fs::remove(root / "a" / kOutboxDir / heartbeat);
  EXPECT_TRUE(wait_until([&] { return !fs::exists(shared / heartbeat); }, 20)) << read_file(root / "a.log");

  ::kill(a, SIGTERM);
  ::kill(b, SIGTERM);
  EXPECT_EQ(wait_process(a), 0) << read_file(root / "a.log");
  EXPECT_EQ(wait_process(b), 0) << read_file(root / "b.log");
}

TEST(SyncerProcess, ParentGoneMeansFinalUploadPassThenExit) {
  fs::path root = fresh_dir("parent"), shared = root / "shared";
  fs::create_directories(shared);
  pid_t sleeper = start_process({"/bin/sleep", "100"}, root / "sleep.log");
  pid_t syncer = start_process({kSync, "--shared", shared.string(), "--local", (root / "w").string(), "--worker", "w",
                                "--poll-ms", "3600000", "--parent-pid", std::to_string(sleeper)},
                               root / "w.log");
  ASSERT_TRUE(wait_until([&] { return fs::exists(root / "w" / kSyncerStatsFile); }, 10));
  EXPECT_EQ(stats_of(root / "w")["passes"], 1);  // written at once, though the next poll is an hour away
  // Published after the first poll: only the final pass can upload it (the departure heartbeat).
  std::string bye = framed_file(99);
  fs::create_directories(root / "w" / kOutboxDir / "hb");
  write_file_atomic(root / "w" / kOutboxDir / "hb" / "w.bye", bye);
  ::kill(sleeper, SIGKILL);
  wait_process(sleeper);
  auto t0 = Clock::now();
  EXPECT_EQ(wait_process(syncer), 0) << read_file(root / "w.log");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_EQ(read_file(shared / "hb" / "w.bye"), bye);
  EXPECT_TRUE(fs::exists(root / "w" / kOutboxDir / "hb" / sent_of("w.bye")));
}

TEST(SyncerProcess, SigtermExitsZero) {
  fs::path root = fresh_dir("sigterm"), shared = root / "shared";
  fs::create_directories(shared);
  pid_t syncer = start_process({kSync, "--shared", shared.string(), "--local", (root / "w").string()}, root / "w.log");
  ASSERT_TRUE(wait_until([&] { return fs::exists(root / "w" / kSyncerStatsFile); }, 10));
  ::kill(syncer, SIGTERM);
  EXPECT_EQ(wait_process(syncer), 0) << read_file(root / "w.log");
}

TEST(SyncerProcess, OncePassAndBadFlags) {
  fs::path root = fresh_dir("flags"), shared = root / "shared";
  fs::create_directories(shared);
  write_bytes(shared / "x.bin", framed_file(5));
  auto once = run_process({kSync, "--once", "--shared", shared.string(), "--local", (root / "w").string()}, 30);
  EXPECT_EQ(once.exit_code, 0) << once.output;
  EXPECT_TRUE(fs::exists(root / "w" / kInboxDir / flag_of("x.bin")));

  // --on-demand-prefix repeats (as `gradbox train` passes both prefixes); control.json is mirrored.
  const std::string contribution(kContributionPrefix), part(kCheckpointPartPrefix);
  write_bytes(shared / "r" / (contribution + "a.gbx"), framed_file(6));
  write_bytes(shared / "ckpt" / (part + "0.gbx"), framed_file(7));
  write_bytes(shared / "r" / "c-a.gbx", framed_file(8));
  write_bytes(shared / kControlFile, R"({"micro_batch": 8})");
  auto on_demand = run_process({kSync, "--once", "--shared", shared.string(), "--local", (root / "w2").string(),
                                "--on-demand-prefix", contribution, "--on-demand-prefix", part, "--control-refresh-s", "0"}, 30);
  EXPECT_EQ(on_demand.exit_code, 0) << on_demand.output;
  EXPECT_EQ(files_under(root / "w2" / kInboxDir), (std::vector<std::string>{std::string(kControlFile), "r/c-a.gbx",
                                                                          flag_of("r/c-a.gbx"), "x.bin", flag_of("x.bin")}));

  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  std::vector<Case> cases = {
      {{"--shared", (root / "missing").string(), "--local", (root / "w").string()}, "--shared"},
      {{"--shared", shared.string(), "--local", "/proc/gradbox_no"}, "--local"},
      {{"--shared", shared.string(), "--local", (root / "w").string(), "--backend", "ftp"}, "--backend"},
      {{"--shared", shared.string(), "--local", (root / "w").string(), "--jobs", "0"}, "--jobs"},
      {{"--shared", shared.string(), "--local", (root / "w").string(), "--backend", "rclone"}, "--shared"},
      {{"--local", (root / "w").string()}, "--shared"},
      {{"--shared", shared.string(), "--local", (root / "w").string(), "--on-demand-prefix", ""}, "--on-demand-prefix"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{kSync};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = run_process(argv, 30);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << "expected the message to name " << c.names << ": " << r.output;
  }
}

}  // namespace
}  // namespace gradbox::syncer
