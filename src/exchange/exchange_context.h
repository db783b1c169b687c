#pragma once
// What every part of one worker's folder exchange shares: its settings, the seam (mirror and
// clock), its counters, and the few operations every part performs on files the same way
// (framing headers, publishing, reading a peer's file defensively). One per FolderExchange.
// Uses protobuf (wire); torch-free.
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "exchange/exchange_config.h"
#include "exchange/folder_checkpoint.h"
#include "mirror/clock.h"
#include "mirror/mirror.h"
#include "wire/envelope.h"

namespace gradbox::exchange {

struct ExchangeStats {
  uint64_t rounds = 0;
  uint64_t skipped_rounds = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  // Of those, the rounds' files (contributions, agreements, reduced shards), each once: what a
  // round costs, without heartbeats and run configs (checkpoint parts are counted by neither).
  uint64_t round_bytes_written = 0;
  uint64_t round_bytes_read = 0;
  uint64_t agreements_published = 0;
  uint64_t failovers = 0;
  uint64_t late_agreements_seen = 0;  // a higher epoch won over this replica's view: logged
  uint64_t rejected_files = 0;
  uint64_t unsigned_or_forged_files = 0;  // of those, files whose MAC tag was missing or wrong
  uint64_t upload_cap_warnings = 0;       // the last day's uploads neared or reached --upload-cap-gb
  uint64_t upload_cap_slowdowns = 0;      // grad_accum doublings this worker proposed for the cap
  uint64_t contributions_left_out = 0;
  uint64_t contributions_refused = 0;  // left out by an agreement for their values (Note [Checked contributions])
  // Decodes of contributions: a shard's owner checks and sums each in one (Note [The check and
  // the sum in one pass]); a refusal costs a second.
  uint64_t contributions_decoded = 0;
  uint64_t commits_summed_ahead = 0;  // others' all-gather commits applied from a sum made before they came
  uint64_t fingerprints_checked = 0;
  uint64_t fingerprint_mismatches = 0;
  uint64_t config_mismatches = 0;
  uint64_t followed_rounds = 0;      // applied without contributing (joining, catching up)
  uint64_t members_added = 0;        // by views this worker agreed
  uint64_t members_dropped = 0;
  uint64_t self_elections = 0;       // whole-run resumes started here
  uint64_t resyncs = 0;              // reloads of the agreed state
  uint64_t checkpoints_published = 0;
  uint64_t checkpoint_failovers = 0;
  uint64_t control_changes = 0;
  uint64_t blind_waits = 0;          // decisions postponed because the folder could not be seen
  uint64_t agreements_withdrawn = 0; // own agreements that did not land within their window
  uint64_t partials_published = 0;   // own partial deltas (Note [Partial deltas])
  uint64_t partials_salvaged = 0;    // a member's partial Δ pinned in place of its whole one, as an owner
  double contribution_deadline_s = 0;
  double wait_seconds = 0;
  std::vector<std::string> rejected;

  nlohmann::json to_json() const;
};

// Note [Counters across lives]
// A worker killed and restarted starts its counters at zero, and its stats.json is rewritten
// by the new life: what an earlier life rejected or refused would be lost, and a test or a
// user reading "rejected_files: 0" would be told nothing happened. So stats.json also carries
// "all_lives": every counter summed over this worker's lives in this local folder (the newest
// 100 rejection reasons; "lives" counts them). A new life reads the old file's all_lives (or,
// from an older gradbox, its counters) as where its own sums start.
// What the stats file left by this worker's earlier lives says they counted ({} when none).
nlohmann::json earlier_lives(const std::filesystem::path& stats_file, const std::string& worker);
nlohmann::json all_lives(const nlohmann::json& earlier, const nlohmann::json& this_life);

// This process's life in the run: the secret behind its unpredictable names (Note
// [Unpredictable names]) and the identity a same-named second session is told apart by.
class Incarnation {
 public:
  Incarnation(uint64_t seed, int64_t started_unix_ms);
  uint64_t id() const { return id_; }  // public: written in heartbeats
  int64_t started_unix_ms() const { return started_unix_ms_; }
  // 16 hex digits nobody without the secret can predict, fixed for `what` in this life.
  std::string token(const std::string& what) const;

 private:
  uint64_t secret_;
  uint64_t id_;
  int64_t started_unix_ms_;
};

// Byte buffers kept across rounds for a round's large files (contributions read and written,
// reduced shards). A fresh 50 MB buffer costs ~12k page faults and their
// zeroing, more than encoding it; a buffer kept from the last round costs neither, as long as
// it is large enough: one that must grow is a fresh one. take(bytes) hands out the smallest
// spare that holds `bytes`, else the largest grown to hold them with an eighth to spare; for a
// size not known, the largest (an empty string when there is none). give() keeps the kKept
// largest of those worth keeping. Between rounds the pool holds about what a round uses.
class BufferPool {
 public:
  std::string take(size_t bytes = SIZE_MAX);
  void give(std::string&& buffer);
  size_t spare() const { return spare_.size(); }

 private:
  static constexpr size_t kKept = 8;
  static constexpr size_t kWorthKeeping = size_t{1} << 20;
  std::vector<std::string> spare_;  // by capacity, largest last
};

// Gives `bytes` back to `pool` when the scope ends, however it ends.
struct BufferReturn {
  BufferPool& pool;
  std::string& bytes;
  ~BufferReturn() { pool.give(std::move(bytes)); }
};

class ExchangeContext {
 public:
  ExchangeContext(FolderExchangeConfig config, mirror::Mirror& mirror, mirror::Clock& clock);

  FolderExchangeConfig config;
  mirror::Mirror& mirror;
  mirror::Clock& clock;
  ExchangeStats stats;
  Incarnation incarnation;
  BufferPool buffers;

  const log::Logger& log() const { return logger_; }  // "exchange <worker>": many share a simulation
  FileIdentity identity() const { return FileIdentity{config.run_id, config.model_fingerprint, config.file_mac}; }
  wire::FileHeader new_header();
  // Frames a file to be published under rel: tagged in a signed run (Note [Signed files]).
  std::string frame(const std::string& rel, wire::FileHeader header, std::string_view payload = {}) const;
  // What a file under rel is checked with.
  wire::FileKey key(std::string_view rel) const { return wire::FileKey{config.file_mac.get(), rel}; }
  // The same as pieces, the payload not copied (wire::frame_pieces): a round's large files.
  wire::FramedPieces frame_pieces(const std::string& rel, wire::FileHeader header, std::string_view payload) const;
  // Publishes a framed file (write-once), counting its bytes for the daily-upload report.
  void publish(const std::string& rel, const std::string& bytes);
  void publish(const std::string& rel, const wire::FramedPieces& framed);
  uint64_t bytes_published_last_day();
  // What this worker's uploads of the last kUploadPaceWindowS (or of its life, when shorter)
  // come to in a day; nullopt while it has uploaded for less than kUploadPaceMinS.
  std::optional<double> upload_pace_bytes_per_day();
  static constexpr double kUploadPaceWindowS = 3600;
  static constexpr double kUploadPaceMinS = 600;
  // A peer's file (or, with Side::own_first, this worker's own when it has one under that name),
  // parsed and checked to belong to this run; nullopt, logged and counted, when it must not be used.
  // Its payload's buffer comes from `buffers`: give it back there once done with it.
  enum class Side { peers, own_first };
  std::optional<wire::WireFile> read_checked(const std::string& rel, Side side = Side::peers);
  void reject(const std::string& rel, const std::string& reason);
  bool rejected(const std::string& rel) const { return rejected_.count(rel) > 0; }

  // Whether this worker can see the shared folder: the syncer's completed listings, sampled
  // at most every few hundred milliseconds (reading them costs a file read on disk).
  uint64_t listings();
  double seconds_since_new_listing();  // since listings() last grew
  // Since when the folder has been seen without a gap: listings that stop growing for
  // kListingStallS are a blind spell, and what arrives after one may be long overdue.
  double seen_since_s();
  static constexpr double kListingStallS = 3.0;
  // Calls check_alive (if set); throws when the sidecar died.
  void check_alive() const {
    if (config.check_alive) config.check_alive();
  }

 private:
  log::Logger logger_;
  std::deque<std::pair<int64_t, uint64_t>> uploads_;  // (unix ms, bytes) of the last 24 h
  std::optional<int64_t> first_upload_ms_;
  int upload_warning_level_ = 0;  // 0, 1 (past kUploadWarnFraction of the cap), 2 (at the cap)
  static constexpr double kUploadWarnFraction = 0.8;
  void count_published(const std::string& rel, uint64_t size);
  void check_upload_cap();
  std::set<std::string> rejected_;
  // Round files already counted in round_bytes_read (a contribution is read to check it, then
  // to decode it), by round folder; only the newest kRoundsCounted folders are kept.
  void count_round_read(const std::string& rel, size_t bytes);
  static constexpr size_t kRoundsCounted = 32;
  std::map<std::string, std::set<std::string>> round_reads_;
  uint64_t listings_ = 0;
  double listings_read_at_ = -1e300;
  double listings_grew_at_ = -1e300;
  bool looked_without_growth_ = true;  // the last look found no new listing (or there was none)
  double seen_since_s_ = -1e300;
};

}  // namespace gradbox::exchange
