#pragma once
// The cloud-folder simulator: each viewer (worker) gets its own lagging, faulty view of one real
// directory, the "true" shared folder, so the syncer and the trainer can be tested on one
// machine against the failure modes of Drive-like folders:
//   - visibility delay per (viewer, file), log-normal fitted to a median and a p90, counted from
//     the file's mtime in the true folder (an upload sets it); out-of-order arrival follows;
//   - placeholder: the file first shows as 0 bytes (listing and downloads) for an extra while;
//   - truncate / corrupt: one download yields a random prefix / one flipped byte;
//   - stale list (the previous listing again), missing entry, duplicate entry;
//   - bandwidth: transfers sleep size / bandwidth.
// Every decision is a hash of (seed, viewer, path, attempt, kind), so a run is reproducible up
// to timing. Each injected fault is counted and, with a log path, written as one JSONL line
// {t_ms, viewer, fault, path, detail}.
#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "syncer/mounted_backend.h"

namespace gradbox::syncer {

struct SimOptions {
  uint64_t seed = 1;
  double delay_median_ms = 20000;  // Google Drive's order of magnitude; tests scale it down
  double delay_p90_ms = 120000;
  double placeholder_prob = 0;
  double truncate_prob = 0;
  double corrupt_prob = 0;
  double stale_list_prob = 0;
  double missing_prob = 0;
  double duplicate_prob = 0;
  double bandwidth_mbps = 0;  // megabits per second; 0 = unlimited
  std::optional<fs::path> log_path;
};

class SimBackend : public Backend {
 public:
  SimBackend(fs::path true_root, std::string viewer, SimOptions options);
  std::string name() const override { return "sim"; }
  std::vector<RemoteEntry> list() override;
  std::optional<uint64_t> stat(const std::string& rel) override;  // the writer's own view: no lag
  void download(const std::string& rel, const fs::path& local_path) override;
  void upload(const fs::path& local_path, const std::string& rel, UploadMode mode) override;
  void remove(const std::string& rel) override;
  void remove_empty_dirs(const std::string& rel_dir) override;
  std::map<std::string, uint64_t> fault_counts() const override;

  // Visibility delay of `rel` for this viewer, in ms (exposed for tests).
  double delay_ms(const std::string& rel) const;

 private:
  struct View {
    bool visible = false;
    bool placeholder = false;
  };
  double uniform(const std::string& rel, uint64_t attempt, const char* kind) const;
  double lognormal_ms(const std::string& rel, const char* kind) const;
  View view_of(const std::string& rel, int64_t mtime_ms, int64_t now_ms) const;
  void record(const char* fault, const std::string& rel, const std::string& detail);
  void throttle(uint64_t bytes) const;

  MountedBackend truth_;
  std::string viewer_;
  SimOptions options_;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex mutex_;
  std::ofstream log_;
  std::map<std::string, uint64_t> faults_;
  std::unordered_map<std::string, uint64_t> download_attempts_;
  std::unordered_map<std::string, int> announced_;  // bit 1: delay logged, bit 2: placeholder logged
  std::optional<std::vector<RemoteEntry>> last_listing_;
  uint64_t list_calls_ = 0;
};

}  // namespace gradbox::syncer
