// gradbox-sync: keeps a worker's LOCAL outbox/inbox in step with the shared folder.
// The local-disk contract is Note [The syncer contract] (mirror/sync_contract.h). Parses flags,
// builds the backend and the engine, then polls on a Boost.Asio timer, brought forward by changes
// the kernel reports (Note [Waking on changes]), with transfers on a thread pool bounded by --jobs.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <utility>
#include <boost/asio.hpp>
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "common/broken_pipe.h"
#include "common/disk_space.h"
#include "common/error.h"
#include "common/log.h"
#include "mirror/sync_contract.h"
#include "syncer/change_watch.h"
#include "syncer/mounted_backend.h"
#include "syncer/rclone_backend.h"
#include "syncer/sim_backend.h"
#include "syncer/syncer.h"

namespace asio = boost::asio;
using namespace gradbox;
using namespace gradbox::syncer;

namespace {

struct Flags {
  std::string shared, local, worker = "worker", backend = "mounted", rclone = "rclone", log_level = "info";
  int poll_ms = 500, jobs = 2, max_attempts = 5;
  double quarantine_after_s = 900, control_refresh_s = 5;
  std::vector<std::string> on_demand_prefixes;
  pid_t parent_pid = 0;
  bool once = false;
  SimOptions sim;
  std::string sim_log;
};

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A dead child not yet reaped by its parent still answers kill(pid, 0): look at its state.
  std::ifstream stat(str("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

std::unique_ptr<Backend> make_backend(const Flags& f) {
  if (f.backend == "rclone") {
    GB_REQUIRE(f.shared.find(':') != std::string::npos,
               "--shared: '", f.shared, "' is not an rclone remote (name:path) for --backend rclone");
    return std::make_unique<RcloneBackend>(f.shared, f.rclone);
  }
  // Never created here: a missing shared folder is an unmounted drive, not a new run.
  GB_REQUIRE(fs::is_directory(f.shared), "--shared: '", f.shared, "' is not a directory (--backend ", f.backend,
             "; is the drive mounted?)");
  if (f.backend == "mounted") return std::make_unique<MountedBackend>(f.shared);
  SimOptions sim = f.sim;
  if (!f.sim_log.empty()) sim.log_path = f.sim_log;
  return std::make_unique<SimBackend>(f.shared, f.worker, sim);
}

void check_local(const std::string& local) {
  std::error_code ec;
  fs::create_directories(local, ec);
  GB_REQUIRE(!ec && fs::is_directory(local), "--local: cannot create '", local, "'", ec ? ": " + ec.message() : "");
  GB_REQUIRE(::access(local.c_str(), W_OK) == 0, "--local: '", local, "' is not writable");
}

// The worker reads this status as "my disk is full" and names the path from the line above it
// (Note [A full disk] in common/disk_space.h).
int exit_for_full_disk(const Syncer& syncer) {
  std::cerr << "gradbox-sync: error: the local disk is full: " << *syncer.local_disk_full() << "\n";
  return mirror::kSyncerExitLocalDiskFull;
}

int run_daemon(Syncer& syncer, const Flags& f) {
  log::Logger logger("syncer");
  asio::io_context io;
  asio::thread_pool pool(static_cast<size_t>(f.jobs));
  asio::steady_timer poll_timer(io), parent_timer(io);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::atomic<bool> stopping = false;
  // Note [Waking on changes]: a change under a watched folder brings the next poll forward.
  ChangeWatch changes(syncer.watch_roots());
  std::optional<asio::posix::stream_descriptor> change_events;
  if (changes.fd() >= 0) change_events.emplace(io, ::dup(changes.fd()));

  auto stop = [&](const std::string& why) {
    if (stopping.exchange(true)) return;
    logger.info(str("stopping: ", why));
    poll_timer.cancel();
    parent_timer.cancel();
    signals.cancel();
    if (change_events) change_events->cancel();
  };
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) stop(str("signal ", sig));
  });

  std::function<void(const Task&)> post;
  post = [&](const Task& t) {
    asio::post(pool, [&, t] {
      try {
        syncer.execute(t);
        syncer.write_stats_if_changed(/*throttle=*/true);
        // Note [Upload order]: the next checkpoint part (or anything new) goes at once, not
        // a poll later, so that a checkpoint still uploads back to back.
        if (t.kind == Task::Kind::upload && mirror::is_checkpoint_part(t.rel) && !stopping)
          for (const Task& next : syncer.plan_uploads()) post(next);
      } catch (const std::exception& e) {
        if (!syncer.note_if_disk_full(e)) logger.warn(str("transfer of ", t.rel, " failed (retrying later): ", e.what()));
      }
      if (syncer.local_disk_full()) asio::post(io, [&] { stop("the local disk is full"); });
    });
  };

  std::function<void()> poll;
  poll = [&] {
    if (stopping) return;
    // A daemon outlives transient trouble (a file vanishing mid-scan, a full disk for a
    // moment): log it and try again at the next poll.
    try {
      changes.watch_new_roots();  // requests/ appears with a worker's first request
      std::vector<Task> tasks = syncer.plan_uploads();
      for (auto& t : syncer.plan_removals()) tasks.push_back(t);
      for (auto& t : syncer.plan_downloads()) tasks.push_back(t);
      for (auto& t : tasks) post(t);
      syncer.write_stats_if_changed(/*throttle=*/true);
    } catch (const std::exception& e) {
      if (!syncer.note_if_disk_full(e)) logger.warn(str("poll failed (retrying next poll): ", e.what()));
    }
    if (syncer.local_disk_full()) return stop("the local disk is full");
    poll_timer.expires_after(std::chrono::milliseconds(f.poll_ms));
    // Expired, or cancelled by a change (a stop sets `stopping` first).
    poll_timer.async_wait([&](const boost::system::error_code&) { poll(); });
  };

  std::function<void()> wait_for_changes;
  wait_for_changes = [&] {
    change_events->async_wait(asio::posix::stream_descriptor::wait_read, [&](const boost::system::error_code& ec) {
      if (ec || stopping) return;
      if (changes.drain()) poll_timer.cancel();  // the poll waiting on it runs now
      wait_for_changes();
    });
  };
  if (change_events) wait_for_changes();

  std::function<void()> watch_parent;
  watch_parent = [&] {
    if (process_gone(f.parent_pid)) return stop(str("parent process ", f.parent_pid, " is gone"));
    parent_timer.expires_after(std::chrono::milliseconds(200));
    parent_timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) watch_parent();
    });
  };
  if (f.parent_pid > 0) watch_parent();

  asio::post(io, poll);
  io.run();
  pool.join();  // finish in-flight transfers
  try {
    syncer.final_pass();  // a worker's last files (its departure heartbeat) go up, its withdrawn ones go
    syncer.write_stats_if_changed();
  } catch (const std::exception& e) {
    if (!syncer.note_if_disk_full(e)) throw;
  }
  if (syncer.local_disk_full()) return exit_for_full_disk(syncer);
  logger.info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gradbox::survive_broken_pipes();  // rclone may die mid-transfer: Note [A broken pipe is an error, not a death]
  CLI::App app{str("gradbox-sync: moves framed files between a worker's local ", mirror::kOutboxDir, "/",
                   mirror::kInboxDir, " and the shared folder")};
  Flags f;
  app.add_option("--shared", f.shared, "Shared folder: a directory, or an rclone remote name:path")->required();
  app.add_option("--local", f.local,
                 str("The worker's local directory (", mirror::kOutboxDir, "/, ", mirror::kInboxDir, "/, ",
                     mirror::kRequestsDir, "/, ", mirror::kQuarantineDir, "/, ", mirror::kSyncerStatsFile, ")"))
      ->required();
  app.add_option("--worker", f.worker, "Worker name (logs; the simulator's viewer)");
  app.add_option("--backend", f.backend, "mounted | rclone | sim")->check(CLI::IsMember({"mounted", "rclone", "sim"}));
  app.add_option("--poll-ms", f.poll_ms, "Poll interval in ms")->check(CLI::Range(1, 3600000));
  app.add_option("--jobs", f.jobs, "Concurrent transfers")->check(CLI::Range(1, 64));
  app.add_option("--max-attempts", f.max_attempts, "Downloads of a corrupt file before quarantine")->check(CLI::Range(1, 1000));
  app.add_option("--quarantine-after-s", f.quarantine_after_s, "Quarantine a file incomplete this long")->check(CLI::PositiveNumber);
  // One value per occurrence, so a prefix cannot swallow the next argument.
  app.add_option("--on-demand-prefix", f.on_demand_prefixes,
                 str("Fetch files named with this prefix only when <local>/", mirror::kRequestsDir,
                     "/<path> exists (repeatable)"))
      ->allow_extra_args(false);
  app.add_option("--control-refresh-s", f.control_refresh_s,
                 str("Download ", mirror::kControlFile, " at least this often (an edit can keep its size)"))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--parent-pid", f.parent_pid, "Exit (after a final upload pass) when this process is gone")->check(CLI::PositiveNumber);
  app.add_flag("--once", f.once, "One full pass (upload, delete, download), then exit");
  app.add_option("--rclone", f.rclone, "rclone binary");
  app.add_option("--log-level", f.log_level, "debug | info | warn | error");
  app.add_option("--sim-seed", f.sim.seed, "Simulator seed");
  app.add_option("--sim-delay-median-ms", f.sim.delay_median_ms, "Visibility delay median")->check(CLI::NonNegativeNumber);
  app.add_option("--sim-delay-p90-ms", f.sim.delay_p90_ms, "Visibility delay 90th percentile")->check(CLI::NonNegativeNumber);
  app.add_option("--sim-placeholder-prob", f.sim.placeholder_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-truncate-prob", f.sim.truncate_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-corrupt-prob", f.sim.corrupt_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-stale-list-prob", f.sim.stale_list_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-missing-prob", f.sim.missing_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-duplicate-prob", f.sim.duplicate_prob)->check(CLI::Range(0.0, 1.0));
  app.add_option("--sim-bandwidth-mbps", f.sim.bandwidth_mbps, "Simulated bandwidth in Mbit/s (0: unlimited)")->check(CLI::NonNegativeNumber);
  app.add_option("--sim-log", f.sim_log, "JSONL file: one line per injected fault");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    log::setup(log::parse_level(f.log_level));
    GB_REQUIRE(f.sim.delay_p90_ms >= f.sim.delay_median_ms, "--sim-delay-p90-ms (", f.sim.delay_p90_ms,
               ") must be >= --sim-delay-median-ms (", f.sim.delay_median_ms, ")");
    for (const auto& prefix : f.on_demand_prefixes)
      GB_REQUIRE(!prefix.empty(), "--on-demand-prefix: an empty prefix would hold back every file");
    GB_REQUIRE(f.parent_pid == 0 || !process_gone(f.parent_pid), "--parent-pid: process ", f.parent_pid, " does not exist");
    check_local(f.local);
    auto backend = make_backend(f);
    if (f.parent_pid > 0 && ::getppid() == f.parent_pid) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    SyncerOptions options{f.local, f.worker, f.max_attempts, f.quarantine_after_s};
    options.on_demand_prefixes = f.on_demand_prefixes;
    options.control_refresh_s = f.control_refresh_s;
    Syncer syncer(std::move(backend), options);
    log::Logger("syncer").info(str("worker ", f.worker, ": ", syncer.backend().name(), " ", f.shared, " <-> ", f.local,
                                   f.once ? " (one pass)" : str(", polling every ", f.poll_ms, " ms, ", f.jobs, " jobs")));
    if (f.once) {
      try {
        syncer.run_pass();
      } catch (const std::exception& e) {
        if (!syncer.note_if_disk_full(e)) throw;
      }
      return syncer.local_disk_full() ? exit_for_full_disk(syncer) : 0;
    }
    return run_daemon(syncer, f);
  } catch (const InputError& e) {
    std::cerr << "gradbox-sync: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gradbox-sync: error: " << e.what() << "\n";
    return is_disk_full(e) ? mirror::kSyncerExitLocalDiskFull : 1;
  }
}
