#pragma once
// The syncer engine: one side of Note [The syncer contract] (mirror/sync_contract.h), which
// names the local layout (outbox/, inbox/, requests/, quarantine/, syncer/stats.json) and the
// markers. What the engine adds to it:
//
//   uploads     write-once: a shared name already holding other bytes is a conflict, logged once
//               and never overwritten; a shorter prefix of our own bytes (our interrupted upload)
//               is completed. Checkpoint parts go last (Note [Upload order]).
//   downloads   copied to <rel>.tmp.<pid>, verified (wire::verify_file), renamed, then flagged.
//               Never downloaded again in this process's lifetime, nor when its .flag exists.
//   quarantine  unsupported or corrupt after max_attempts downloads, incomplete (or a 0-byte
//               placeholder) past quarantine_after_s. Never retried.
//   control     control.json is not verified, flagged or quarantined. Downloaded when its listed
//               size changes and every control_refresh_s, and renamed over the old copy
//               (atomically) only when it parses as a JSON object and its bytes differ. Kept when
//               it leaves the listing. Never uploaded nor deleted by the syncer.
//   outages     a listing that fails is not a pass: passes and settled_passes stand still while
//               the shared folder cannot be listed (SharedFolderGone: unmounted or deleted; no
//               backend recreates it). Each failed call counts in transfer_errors; one warning
//               starts an outage and one line ends it, at the next good listing.
//   stats       rewritten atomically when they change.
//   full disk   a write refused for space under the local folder ends the syncer (Note [A full
//               disk] in common/disk_space.h): gradbox-sync exits with
//               mirror::kSyncerExitLocalDiskFull. A full shared folder is warned about once per
//               spell and its uploads are retried.
//
// The engine is driven in steps so tests are deterministic: plan_*() pick the work of one poll
// (never a path already in flight) and execute() does one transfer; run_pass() does one whole
// pass in the calling thread. gradbox-sync runs execute() on a thread pool.
#include <chrono>
#include <map>
#include <optional>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/sync_contract.h"
#include "syncer/backend.h"

namespace gradbox::syncer {

struct SyncerOptions {
  fs::path local;
  std::string worker = "worker";
  int max_attempts = 5;             // downloads of a corrupt file before quarantine
  double quarantine_after_s = 900;  // a file incomplete this long is quarantined
  // Files whose name starts with one of these are fetched only once the worker asks for them by
  // creating <local>/requests/<rel> (mirror::kContributionPrefix: only a shard's owner needs
  // them; mirror::kCheckpointPartPrefix: only when restoring).
  std::vector<std::string> on_demand_prefixes = {};
  // control.json is re-downloaded at least this often: an edit can keep its size.
  double control_refresh_s = 5;
  // The clock for incomplete deadlines (tests inject one).
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
};

struct QuarantinedFile {
  std::string path;
  std::string reason;
};

struct SyncerStats {
  uint64_t flagged = 0;
  uint64_t bytes_downloaded = 0;
  uint64_t uploaded = 0;
  uint64_t bytes_uploaded = 0;
  uint64_t deleted = 0;
  uint64_t placeholders_seen = 0;  // distinct files first listed as 0 bytes
  uint64_t incomplete_seen = 0;    // downloads that verified incomplete
  uint64_t corrupt_seen = 0;       // downloads that verified corrupt
  uint64_t unsupported_seen = 0;   // downloads of a newer frame/wire version (or a damaged version field)
  uint64_t retries = 0;            // downloads of a file after a failed attempt
  uint64_t quarantined = 0;
  uint64_t upload_conflicts = 0;   // shared name taken by different bytes: not uploaded
  uint64_t transfer_errors = 0;    // backend calls that failed (retried later)
  uint64_t control_updates = 0;    // new control.json contents put in the inbox
  uint64_t control_rejected = 0;   // distinct control.json contents that were not a JSON object
  uint64_t passes = 0;             // listings of the shared folder planned: >= 1 once it was seen
  uint64_t settled_passes = 0;     // newest pass whose downloads (and every earlier pass's) were all tried
  std::vector<QuarantinedFile> quarantined_files;
  std::map<std::string, uint64_t> sim_faults;
  nlohmann::json to_json() const;
};

struct Task {
  enum class Kind { upload, remove, download, control };  // control: fetch control.json
  Kind kind;
  std::string rel;
  uint64_t listed_size = 0;  // download: the size the listing reported
};

// Note [Upload order]
// A folder checkpoint is published all at once: ~240 parts of 64 MB for GPT-2-Large with
// DiLoCo's state, 12 minutes of a 20 MB/s upload. Posted to the transfer pool in the outbox's
// order ("checkpoints/" sorts before "rounds/"), they held every round file published meanwhile
// for those 12 minutes, and the round went on without that worker (`gradbox simulate` showed
// it: the checkpoint's writer was left out of the round, or failed over as the owner). So the
// daemon plans checkpoint parts after every other upload and keeps at most one in flight,
// planning the next as soon as one is sent (not a poll later): a round's file shares the link
// with one part at most, and the checkpoint still uploads back to back. One part at a time is
// slower than --jobs of them where a backend's transfers are each rate-limited (rclone to
// Drive): the checkpoint is background traffic. The simulated folder's links do the same
// (memory_mirror.h).
enum class PartUploads { one_at_a_time, all };

class Syncer {
 public:
  Syncer(std::unique_ptr<Backend> backend, SyncerOptions options);

  // Work for one poll; each returned task is marked in flight until execute() finishes it.
  // Checkpoint parts come last; the daemon takes them one_at_a_time (Note [Upload order]).
  std::vector<Task> plan_uploads(PartUploads parts = PartUploads::one_at_a_time);
  std::vector<Task> plan_removals();
  std::vector<Task> plan_downloads();  // lists the shared folder
  // One transfer; never throws for backend failures (counted, logged, retried on a later poll).
  void execute(const Task& task);

  // True when `e` is a write refused for space. Under the local folder it is remembered (the
  // first one) and logged once: the daemon then stops. In the shared folder it is warned about
  // once until an upload succeeds again.
  bool note_if_disk_full(const std::exception& e);
  // The message of the first write refused for space under the local folder, if any.
  std::optional<std::string> local_disk_full() const;

  // One whole pass in this thread: uploads, deletions, downloads. Then writes stats if changed.
  void run_pass();
  // The pass before exit: uploads (the departure heartbeat) and deletions (a finished run's
  // withdrawn rounds), no listing of the shared folder.
  void final_pass();

  SyncerStats stats() const;
  // What a ChangeWatch should watch for this engine (Note [Waking on changes]): the outbox, the
  // requests and, where the backend has one, the shared folder's directory.
  std::vector<fs::path> watch_roots() const;
  // Rewrites stats.json when a counter changed. The daemon passes throttle = true: at most
  // one write (and fsync) a second, since fault counters can change on every poll.
  void write_stats_if_changed(bool throttle = false);
  Backend& backend() { return *backend_; }
  const fs::path& outbox() const { return outbox_; }
  const fs::path& inbox() const { return inbox_; }

 private:
  struct DownloadState {
    int corrupt_attempts = 0;
    int failed_attempts = 0;
    bool placeholder_counted = false;
    std::optional<std::chrono::steady_clock::time_point> incomplete_since;
  };
  bool try_begin(const std::string& rel);  // false if in flight
  void end(const std::string& rel);
  bool is_own(const std::string& rel) const;
  void do_upload(const std::string& rel);
  void do_remove(const std::string& rel);
  void do_download(const std::string& rel);
  // A download that found the file still arriving (retried later, quarantined once overdue).
  void note_incomplete(const std::string& rel, const std::string& reason, const fs::path& bad_bytes);
  bool incomplete_overdue(const std::string& rel);  // incomplete for longer than quarantine_after_s
  void do_control_download(const Task& task);
  void quarantine(const std::string& rel, const std::string& reason, const fs::path& bad_bytes);
  void changed();
  // A failed backend call that looks like an outage (a failed listing, a missing shared folder):
  // counted; logged as a warning only when it starts one.
  void note_outage(const std::string& what);

  std::unique_ptr<Backend> backend_;
  SyncerOptions options_;
  fs::path outbox_, inbox_, quarantine_, stats_path_;

  mutable std::mutex mutex_;
  std::set<std::string> in_flight_;
  std::map<std::string, uint64_t> pass_of_;  // download in flight -> the pass that planned it
  std::map<uint64_t, int> outstanding_;      // pass -> downloads not yet tried
  std::set<std::string> done_;      // flagged or quarantined in this lifetime: never again
  std::set<std::string> own_;       // ever in our outbox in this lifetime: never downloaded
  std::set<std::string> conflicts_; // upload refused (name taken); logged once
  std::unordered_map<std::string, DownloadState> downloads_;
  // control.json as last fetched: its listed size and when (unset: fetch at the next listing).
  std::optional<uint64_t> control_size_;
  std::optional<std::chrono::steady_clock::time_point> control_fetched_;
  std::set<uint64_t> control_rejected_;  // checksums of rejected contents: warned about once
  std::set<uint64_t> control_oversized_;  // listed sizes over mirror::kMaxControlBytes: warned about once
  std::optional<std::string> local_disk_full_;
  bool shared_full_warned_ = false;      // since the last upload that went through
  uint64_t outage_failures_ = 0;         // failed calls since the last good listing (0: no outage)
  std::optional<std::chrono::steady_clock::time_point> outage_since_;
  SyncerStats stats_;
  uint64_t version_ = 0;
  std::string last_stats_;
  std::chrono::steady_clock::time_point last_stats_write_{};
};

// The shared folder's control file (at its root) and its inbox copy: Note [The syncer contract].
using mirror::kControlFile;

// Name filters of the contract.
bool is_temp_name(const std::string& rel);    // contains mirror::kTempMarker
bool is_hidden_name(const std::string& rel);  // a component starts with '.'

}  // namespace gradbox::syncer
