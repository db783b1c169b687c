// A worker's own machine failing under it, in a two-worker run through a plain shared folder:
//  - a full local disk, for real (Note [A full disk] in src/common/disk_space.h): worker b has
//    one of its folders on a small tmpfs of its own (a private mount namespace: `unshare --user
//    --map-root-user --mount`, no privileges needed), which the test fills mid-run. b must warn
//    while one more checkpoint fits, stop at once when the disk is full, say so and where, and
//    leave its last checkpoint whole;
//  - b's syncer killed with SIGKILL: b must stop at once and say so.
// Either way a finishes the run without b.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "cli_fixture.h"
#include "process.h"

namespace gradbox::testing {
namespace {

constexpr const char* kUnshare = "/usr/bin/unshare";

bool private_mounts_work() {
  if (!fs::exists(kUnshare)) return false;
  const fs::path probe = fs::temp_directory_path() / ("gradbox_mount_probe_" + std::to_string(::getpid()));
  fs::create_directories(probe);
  const ProcessResult r = run_process({kUnshare, "--user", "--map-root-user", "--mount", "/bin/sh", "-c",
                                       "mount -t tmpfs -o size=1m probe " + probe.string()},
                                      30);
  fs::remove_all(probe);
  return r.exit_code == 0;
}

class FullDiskTest : public CliTest {
 public:  // the syncer test below borrows the run's set-up
  void SetUp() override {
    CliTest::SetUp();
    if (IsSkipped()) return;
    static const bool can_mount = private_mounts_work();
    if (!can_mount) GTEST_SKIP() << "this machine refuses private mount namespaces (unshare --user --mount)";
  }

  // A worker of the run in `base` through the plain shared folder base/shared.
  static std::vector<std::string> worker_argv(const fs::path& base, const std::string& name, int steps) {
    return train(base / name, {"--block-size", "32", "--max-steps", std::to_string(steps), "--checkpoint-interval", "5",
                               "--log-interval", "5", "--dropout", "0", "--micro-batch", "4", "--shared",
                               (base / "shared").string(), "--worker", name, "--peers", "a,b", "--codec", "fp32",
                               "--contribution-timeout", "3", "--deadline-floor", "1", "--failover-timeout", "6",
                               "--heartbeat-interval", "0.5", "--stale-after", "4", "--checkpoint-part-bytes", "40000",
                               "--give-up-timeout", "120"});
  }

  // Starts worker b with `disk` (a folder inside its run folder) on a 64 MB tmpfs of its own.
  // Once base/fill-1 exists all but `leave` bytes of the disk are taken (then base/nearly is
  // made); once base/fill-2 exists, the rest (then base/filled). When b exits, the fillers are
  // removed and b's checkpoints copied to base/b-after/checkpoints.
  static pid_t start_b_with_a_small_disk(const fs::path& base, const fs::path& disk, uint64_t leave, int steps) {
    fs::create_directories(disk);
    fs::create_directories(base / "b-after");
    auto quoted = [](const fs::path& path) { return std::string(1, '\'').append(path.string()).append(1, '\''); };
    const std::string d = quoted(disk), b = quoted(base);
    const std::string script =
        "mount -t tmpfs -o size=64m gradbox-test-disk " + d + " || exit 99\n"
        "wait_for() { i=0; while [ ! -e \"$1\" ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done; }\n"
        "( wait_for " + b + "/fill-1\n"
        "  avail=$(df --output=avail -B1 " + d + " | tail -n 1)\n"
        "  head -c $((avail - " + std::to_string(leave) + ")) /dev/zero > " + d + "/.filler-1 2>/dev/null; touch " + b + "/nearly\n"
        "  wait_for " + b + "/fill-2\n"
        "  cat /dev/zero > " + d + "/.filler-2 2>/dev/null; touch " + b + "/filled ) &\n"
        "filler=$!\n"
        "\"$@\"; rc=$?\n"
        "kill $filler 2>/dev/null; rm -f " + d + "/.filler-*\n"
        "cp -a " + b + "/b/checkpoints " + b + "/b-after/ 2>/dev/null\n"
        "exit $rc\n";
    std::vector<std::string> argv = {kUnshare, "--user", "--map-root-user", "--mount", "/bin/sh", "-c", script, "sh"};
    for (const std::string& arg : worker_argv(base, "b", steps)) argv.push_back(arg);
    return start_process(argv, base / "b.log");
  }

  struct Outcome {
    int a_exit = -1;
    std::optional<int> b_exit;  // nullopt: b still ran a minute after its disk filled (a hang)
    bool warned = false;        // b said the disk was nearly full before it filled
    std::string a_log, b_log;
  };

  // a and b train; once a has applied round 8 (or, when `fill_after` is not empty, once b's log
  // says it), b's `disk` fills but for `leave` bytes, and once b's log says `warning` (when not
  // empty), it fills up.
  static Outcome run_and_fill(const fs::path& base, const fs::path& disk, uint64_t leave = 0,
                              const std::string& warning = "", const std::string& fill_after = "") {
    constexpr int kSteps = 30;
    fs::create_directories(base / "shared");
    const pid_t a = start_process(worker_argv(base, "a", kSteps), base / "a.log");
    const pid_t b = start_b_with_a_small_disk(base, disk, leave, kSteps);
    Outcome out;
    const bool started = fill_after.empty()
                             ? wait_for([&] { return round_of(base, "a") >= 8; }, 180)
                             : wait_for([&] { return contains(read_bytes(base / "b.log"), fill_after); }, 180);
    if (started) {
      write_bytes(base / "fill-1", "");
      out.warned = wait_for([&] { return fs::exists(base / "nearly"); }, 60) &&
                   (warning.empty() || wait_for([&] { return contains(read_bytes(base / "b.log"), warning); }, 60));
      write_bytes(base / "fill-2", "");
      if (wait_for([&] { return fs::exists(base / "filled"); }, 60)) out.b_exit = wait_process_for(b, 60);
    }
    if (!out.b_exit) {
      kill(b, SIGKILL);
      wait_process(b);
    }
    out.a_exit = wait_process(a);
    out.a_log = read_bytes(base / "a.log");
    out.b_log = read_bytes(base / "b.log");
    return out;
  }

  // b's checkpoints as they were when it stopped: whole, and nothing half-written beside them.
  static void expect_whole_checkpoints(const fs::path& base) {
    const fs::path copy = base / "b-after";
    ASSERT_TRUE(fs::is_directory(copy / "checkpoints"));
    int whole = 0;
    for (const auto& entry : fs::directory_iterator(copy / "checkpoints")) {
      const std::string name = entry.path().filename().string();
      EXPECT_EQ(name.find(".tmp"), std::string::npos) << "a half-written checkpoint was left: " << name;
      whole += fs::exists(entry.path() / "manifest.json");
    }
    ASSERT_GE(whole, 1);
    // Space freed, b starts again (alone here) and resumes from its newest checkpoint.
    const ProcessResult resumed = run_process(train(copy, {"--block-size", "32", "--max-steps", "40",
                                                           "--checkpoint-interval", "5", "--dropout", "0",
                                                           "--micro-batch", "4"}));
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_TRUE(contains(resumed.output, "resumed from " + (copy / "checkpoints").string())) << resumed.output;
    EXPECT_FALSE(contains(resumed.output, "skipping checkpoint")) << resumed.output;
  }
};

TEST_F(FullDiskTest, ACheckpointThatDoesNotFitStopsTheWorkerAndKeepsTheLastWhole) {
  const fs::path base = dir("checkpoint_disk");
  // Room for one checkpoint of ~1.6 MB but not for two: b warns first. The disk fills just
  // after b wrote the checkpoint of step 10, five steps before its next: filled while one is
  // being written, it would leave less than one (b and a step together; b once lagged a's round
  // 8 by the initial checkpoint it fetched, and a fill at that round missed its checkpoints).
  const Outcome out = run_and_fill(base, base / "b" / "checkpoints", 3'000'000, "is nearly full",
                                   (base / "b" / "checkpoints" / "step_00000010").string() + " written");
  EXPECT_TRUE(out.warned) << out.b_log;
  ASSERT_TRUE(out.b_exit.has_value()) << "b still ran a minute after its disk filled\n" << out.b_log;
  EXPECT_EQ(*out.b_exit, 1) << out.b_log;
  EXPECT_TRUE(contains(out.b_log, "cannot write: the disk is full")) << out.b_log;
  EXPECT_TRUE(contains(out.b_log, (base / "b" / "checkpoints").string())) << out.b_log;
  EXPECT_TRUE(contains(out.b_log, "The last checkpoint, ")) << out.b_log;
  EXPECT_FALSE(contains(out.b_log, "internal error")) << out.b_log;
  expect_whole_checkpoints(base);
  EXPECT_EQ(out.a_exit, 0) << out.a_log;
  EXPECT_TRUE(fs::exists(final_checkpoint(base / "a", 30))) << out.a_log;
}

TEST_F(FullDiskTest, AMirrorThatDoesNotFitStopsTheSyncerAndTheWorkerSaysWhy) {
  const fs::path base = dir("mirror_disk");
  const Outcome out = run_and_fill(base, base / "b" / "sync" / "inbox");
  ASSERT_TRUE(out.b_exit.has_value()) << "b still ran a minute after its disk filled\n" << out.b_log;
  EXPECT_EQ(*out.b_exit, 1) << out.b_log;
  EXPECT_TRUE(contains(out.b_log, "the disk is full: the syncer (gradbox-sync) could not write under " +
                                      (base / "b" / "sync").string()))
      << out.b_log;
  EXPECT_TRUE(contains(out.b_log, (base / "b" / "sync" / "inbox").string() + "/")) << out.b_log;  // its last words
  EXPECT_FALSE(contains(out.b_log, "internal error")) << out.b_log;
  // The syncer said it once, naming the file, and did not retry it poll after poll.
  const std::string syncer_log = read_bytes(base / "b" / "sync" / "syncer.log");
  size_t said = 0;
  for (size_t at = syncer_log.find("the local disk is full: "); at != std::string::npos;
       at = syncer_log.find("the local disk is full: ", at + 1))
    ++said;
  EXPECT_EQ(said, 2u) << syncer_log;  // the log line, and the exit's last words on stderr
  EXPECT_TRUE(contains(syncer_log, (base / "b" / "sync" / "inbox").string() + "/")) << syncer_log;
  EXPECT_FALSE(contains(syncer_log, "retrying later")) << syncer_log;
  expect_whole_checkpoints(base);
  EXPECT_EQ(out.a_exit, 0) << out.a_log;
  EXPECT_TRUE(fs::exists(final_checkpoint(base / "a", 30))) << out.a_log;
}

// The pid of the gradbox-sync serving the local folder `local`, or 0.
pid_t syncer_of(const fs::path& local) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_bytes(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (contains(cmdline, "gradbox-sync ") && contains(cmdline, " --local " + local.string() + " "))
      return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

TEST_F(CliTest, AWorkerWhoseSyncerIsKilledStopsAtOnceAndSaysSo) {
  const fs::path base = dir("syncer_killed");
  fs::create_directories(base / "shared");
  const pid_t a = start_process(FullDiskTest::worker_argv(base, "a", 30), base / "a.log");
  const pid_t b = start_process(FullDiskTest::worker_argv(base, "b", 30), base / "b.log");
  pid_t syncer = 0;
  const bool running = wait_for(
      [&] { return round_of(base, "b") >= 5 && (syncer = syncer_of(base / "b" / "sync")) != 0; }, 180);
  std::optional<int> b_exit;
  if (running) {
    kill(syncer, SIGKILL);
    b_exit = wait_process_for(b, 30);
  }
  if (!b_exit) kill(b, SIGKILL), wait_process(b);
  const int a_exit = wait_process(a);
  const std::string b_log = read_bytes(base / "b.log");
  ASSERT_TRUE(running) << b_log;
  ASSERT_TRUE(b_exit.has_value()) << "b still ran 30 s after its syncer died\n" << b_log;
  EXPECT_EQ(*b_exit, 1) << b_log;
  EXPECT_TRUE(contains(b_log, "the syncer (gradbox-sync) exited with status 137")) << b_log;
  EXPECT_TRUE(contains(b_log, (base / "b" / "sync" / "syncer.log").string())) << b_log;
  EXPECT_FALSE(contains(b_log, "internal error")) << b_log;
  EXPECT_EQ(a_exit, 0) << read_bytes(base / "a.log");
  EXPECT_TRUE(fs::exists(final_checkpoint(base / "a", 30)));
}

}  // namespace
}  // namespace gradbox::testing
