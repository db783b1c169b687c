#pragma once
// What `gradbox status` shows: every worker's newest heartbeat in a shared folder (or in a
// syncer's local mirror of it), classified live / stale / left. Torch- and protobuf-free header.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::exchange {

// Drive's upload cap per account and day (--upload-cap-gb's default); the status report
// compares each worker against it.
inline constexpr uint64_t kDailyUploadCap = 750ull * 1000 * 1000 * 1000;

// When a worker uploading `bytes_per_s` on average, with `uploaded_24h` in the last day, reaches
// `cap` within a day: seconds from now (0: already there); nullopt when that rate stays under
// it. Conservative: the bytes that leave the 24-hour window meanwhile are not counted out.
std::optional<double> seconds_to_upload_cap(uint64_t uploaded_24h, double bytes_per_s, uint64_t cap);

struct MemberStatus {
  std::string worker;
  std::string state;  // "live", "joining", "ready", "stale" (no heartbeat for stale_after_s) or "left"
  uint64_t applied_round = 0;
  uint64_t step = 0;  // the optimizer step its parameters are at (DiLoCo: many per round)
  double age_s = 0;   // since its newest heartbeat was written, or got here if that is later (never negative)
  double clock_ahead_s = 0;  // > 0: the writer's clock runs this far ahead of this machine's
  double tokens_per_second = 0;
  double last_loss = 0;
  uint64_t bytes_uploaded_24h = 0;
  uint64_t bytes_uploaded = 0;  // since its life began
  uint64_t tokens = 0;
  std::string run_id;
  double upload_bytes_per_s = 0;         // its life's average (bytes_uploaded over its age)
  bool signed_files = false;             // its heartbeat carries a MAC tag (Note [Signed files])
  uint64_t files_rejected = 0;           // peers' files it refused
  uint64_t unsigned_or_forged_files = 0;  // of those, for a missing or wrong tag
};

// The newest checkpoint manifest that verifies (Note [Folder checkpoints]); its parts may
// still be on their way to a mirror, where they are fetched on demand.
struct CheckpointStatus {
  uint64_t step = 0;  // the rounds it holds (its manifest's step: per-step runs count one round a step)
  std::string publisher;
  uint64_t bytes = 0;  // total of its files
  double age_s = 0;    // since the manifest was written (writer's clock)
};

// What the folder holds (Note [A finished run's rounds]: a finished run keeps only the window of
// round folders and its checkpoints).
struct FolderUsage {
  uint64_t files = 0, bytes = 0;
  uint64_t round_folders = 0, oldest_round = 0;  // oldest_round: meaningless without round folders
  uint64_t round_bytes = 0, checkpoint_bytes = 0;
};
FolderUsage folder_usage(const std::filesystem::path& dir);

struct RunStatus {
  std::vector<MemberStatus> members;        // sorted by worker
  std::string sync;                         // what a round averages (RunConfig.sync): "gradient", "diloco H=..."
  double stale_after_s = 0;                 // what "stale" meant here
  bool stale_after_from_run = false;        // the run's --stale-after (not --stale-after given to status)
  std::vector<std::string> unreadable;      // heartbeat files that did not verify (still arriving?)
  uint64_t newest_round = 0;                // newest round folder present
  std::vector<std::string> quarantined;     // from <local>/syncer/stats.json, when given
  std::optional<CheckpointStatus> checkpoint;
  FolderUsage usage;
  uint64_t upload_cap = kDailyUploadCap;    // bytes per worker and day (--upload-cap-gb)
};

// `dir` is the shared folder or a local mirror (<local>/inbox); `local` (optional) a worker's
// local folder for its syncer's quarantine list.
// stale_after_s: nullopt takes the run's --stale-after from its run configs (kStatusStaleAfterS
// where none says).
inline constexpr double kStatusStaleAfterS = 120;
RunStatus read_run_status(const std::filesystem::path& dir, std::optional<double> stale_after_s,
                          const std::filesystem::path& local = {}, uint64_t upload_cap = kDailyUploadCap);
std::string format_run_status(const RunStatus& status);

}  // namespace gradbox::exchange
