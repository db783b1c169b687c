#pragma once
// What `gradbox status` shows: every worker's newest heartbeat in a shared folder (or in a
// syncer's local mirror of it), classified live / stale / left. Torch- and protobuf-free header.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::exchange {

// Drive's upload cap per account and day; the status report compares each worker against it.
inline constexpr uint64_t kDailyUploadCap = 750ull * 1000 * 1000 * 1000;

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
};

// The newest checkpoint manifest that verifies (Note [Folder checkpoints]); its parts may
// still be on their way to a mirror, where they are fetched on demand.
struct CheckpointStatus {
  uint64_t step = 0;  // the rounds it holds (its manifest's step: per-step runs count one round a step)
  std::string publisher;
  uint64_t bytes = 0;  // total of its files
  double age_s = 0;    // since the manifest was written (writer's clock)
};

struct RunStatus {
  std::vector<MemberStatus> members;        // sorted by worker
  std::string sync;                         // what a round averages (RunConfig.sync): "gradient", "diloco H=..."
  std::vector<std::string> unreadable;      // heartbeat files that did not verify (still arriving?)
  uint64_t newest_round = 0;                // newest round folder present
  std::vector<std::string> quarantined;     // from <local>/syncer/stats.json, when given
  std::optional<CheckpointStatus> checkpoint;
};

// `dir` is the shared folder or a local mirror (<local>/inbox); `local` (optional) a worker's
// local folder for its syncer's quarantine list.
RunStatus read_run_status(const std::filesystem::path& dir, double stale_after_s,
                          const std::filesystem::path& local = {});
std::string format_run_status(const RunStatus& status);

}  // namespace gradbox::exchange
