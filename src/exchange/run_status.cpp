#include "exchange/run_status.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "exchange/folder_exchange.h"
#include "exchange/folder_names.h"
#include "mirror/sync_contract.h"
#include "wire/envelope.h"

namespace gradbox::exchange {
namespace {

namespace fs = std::filesystem;

// Clocks of different machines disagree by this much without anyone noticing.
constexpr double kClockSlackS = 5;

// When this machine got a file: its .flag in a syncer's mirror (written after verification),
// else the file's own modification time.
int64_t seen_unix_ms(const fs::path& file) {
  std::error_code ec;
  fs::path flag = file;
  flag += mirror::kFlagSuffix;
  const fs::path& source = fs::exists(flag, ec) ? flag : file;
  struct ::stat st {};
  if (::stat(source.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The newest manifest under dir/checkpoints that verifies. Any run's: status shows what is there.
std::optional<CheckpointStatus> newest_checkpoint(const fs::path& dir, int64_t now) {
  std::optional<CheckpointStatus> newest;
  uint32_t newest_epoch = 0;
  std::error_code ec;
  for (fs::directory_iterator c(dir / "checkpoints", ec), end; !ec && c != end; c.increment(ec)) {
    wire::FileHeader header;
    try {
      header = wire::read_wire_file(c->path() / "manifest.gbx").header;  // complete, or not counted
    } catch (const std::exception&) {
      continue;  // absent (still uploading) or damaged
    }
    if (!header.has_checkpoint_manifest()) continue;
    const wire::CheckpointManifest& m = header.checkpoint_manifest();
    // Newest step first, then the lowest epoch (the agreed publisher), then by name.
    if (newest && std::make_tuple(m.step(), newest_epoch, newest->publisher) <=
                      std::make_tuple(newest->step, m.epoch(), m.publisher()))
      continue;
    CheckpointStatus s;
    s.step = m.step();
    s.publisher = m.publisher();
    for (const wire::CheckpointFile& f : m.files()) s.bytes += f.bytes();
    s.age_s = static_cast<double>(now - header.created_unix_ms()) / 1000.0;
    newest = s;
    newest_epoch = m.epoch();
  }
  return newest;
}

}  // namespace

std::optional<double> seconds_to_upload_cap(uint64_t uploaded_24h, double bytes_per_s, uint64_t cap) {
  if (uploaded_24h >= cap) return 0.0;
  if (bytes_per_s * 86400.0 <= static_cast<double>(cap)) return std::nullopt;
  return static_cast<double>(cap - uploaded_24h) / bytes_per_s;
}

FolderUsage folder_usage(const fs::path& dir) {
  FolderUsage usage;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    const fs::path rel = it->path().lexically_relative(dir);
    const std::string top = rel.begin()->string();
    if (it.depth() == 1 && top == "rounds" && it->is_directory(fec)) {
      if (const std::optional<uint64_t> round = parse_round_dir(it->path().filename().string())) {
        usage.oldest_round = usage.round_folders == 0 ? *round : std::min(usage.oldest_round, *round);
        ++usage.round_folders;
      }
    }
    if (!it->is_regular_file(fec)) continue;
    const uint64_t bytes = it->file_size(fec);
    if (fec) continue;  // gone meanwhile
    ++usage.files;
    usage.bytes += bytes;
    if (top == "rounds") usage.round_bytes += bytes;
    if (top == "checkpoints") usage.checkpoint_bytes += bytes;
  }
  return usage;
}

RunStatus read_run_status(const fs::path& dir, std::optional<double> stale_after, const fs::path& local, uint64_t upload_cap) {
  GB_REQUIRE(fs::is_directory(dir), "--shared ", dir.string(), ": not a folder");
  RunStatus status;
  status.upload_cap = upload_cap;
  struct Newest {
    uint64_t sequence = 0;
    wire::FileHeader header;
    int64_t seen_ms = 0;  // when this machine got it: the flag in a mirror, else the file's mtime
  };
  std::map<std::string, Newest> newest;
  std::error_code ec;
  for (fs::directory_iterator w(dir / "members", ec), end; !ec && w != end; w.increment(ec)) {
    std::error_code wec;
    for (fs::directory_iterator f(w->path(), wec); !wec && f != fs::directory_iterator(); f.increment(wec)) {
      const std::string name = f->path().filename().string();
      if (!name.starts_with("hb-") || !name.ends_with(".gbx")) continue;
      try {
        wire::WireFile file = wire::read_wire_file(f->path());
        if (!file.header.has_heartbeat()) continue;
        const wire::Heartbeat& hb = file.header.heartbeat();
        auto& slot = newest[hb.worker()];
        if (hb.sequence() >= slot.sequence) slot = {hb.sequence(), file.header, seen_unix_ms(f->path())};
      } catch (const std::exception& e) {
        status.unreadable.push_back(e.what());
      }
    }
  }
  double run_stale_after_s = 0;
  for (fs::directory_iterator f(dir / kRunConfigDir, ec), end; !ec && f != end && status.sync.empty(); f.increment(ec)) {
    if (!is_run_config_name(f->path().filename().string())) continue;
    try {
      const wire::WireFile file = wire::read_wire_file(f->path());
      status.sync = file.header.run_config().sync().empty() ? "gradient" : file.header.run_config().sync();
      run_stale_after_s = file.header.run_config().stale_after_s();
    } catch (const std::exception&) {
      // still arriving, or not one of ours: another config file will say
    }
  }
  status.stale_after_from_run = !stale_after && run_stale_after_s > 0;
  status.stale_after_s = stale_after ? *stale_after : status.stale_after_from_run ? run_stale_after_s : kStatusStaleAfterS;
  const double stale_after_s = status.stale_after_s;
  const int64_t now = unix_ms_now();
  for (const auto& [worker, entry] : newest) {
    const wire::FileHeader& header = entry.header;
    const wire::Heartbeat& hb = header.heartbeat();
    MemberStatus m;
    m.worker = worker;
    // Freshness does not rest on the writer's clock alone: a beat dated in the future (a clock
    // that runs ahead) ages from when this machine got it.
    const double written_age_s = static_cast<double>(now - header.created_unix_ms()) / 1000.0;
    const double seen_age_s = static_cast<double>(now - entry.seen_ms) / 1000.0;
    m.clock_ahead_s = written_age_s < -kClockSlackS ? -written_age_s : 0;
    m.age_s = std::max({written_age_s, seen_age_s, 0.0});
    // Fresh beats keep their own word: "joining" (catching up), "ready" (waiting to be let in), "live".
    m.state = hb.state() == "left" ? "left" : m.age_s > stale_after_s ? "stale" : hb.state().empty() ? "live" : hb.state();
    m.applied_round = hb.applied_round();
    m.step = hb.step();
    m.bytes_uploaded = hb.bytes_uploaded();
    m.tokens_per_second = hb.tokens_per_second();
    m.last_loss = hb.last_loss();
    m.bytes_uploaded_24h = hb.bytes_uploaded_24h();
    if (hb.started_unix_ms() > 0)  // a minute at least: a life's first upload is no rate
      m.upload_bytes_per_s = static_cast<double>(hb.bytes_uploaded()) /
                             std::max(60.0, static_cast<double>(header.created_unix_ms() - hb.started_unix_ms()) / 1000.0);
    m.tokens = hb.tokens();
    m.run_id = header.run_id();
    m.signed_files = !header.mac_nonce().empty();
    m.files_rejected = hb.files_rejected();
    m.unsigned_or_forged_files = hb.unsigned_or_forged_files();
    status.members.push_back(m);
  }
  status.newest_round = newest_round_folder(dir);
  status.checkpoint = newest_checkpoint(dir, now);
  status.usage = folder_usage(dir);
  if (!local.empty() && fs::exists(local / mirror::kSyncerStatsFile)) {
    const nlohmann::json stats = nlohmann::json::parse(read_file(local / mirror::kSyncerStatsFile), nullptr, false);
    if (stats.is_object() && stats.contains("quarantined_files"))
      for (const auto& q : stats["quarantined_files"])
        status.quarantined.push_back(q.value("path", "?") + ": " + q.value("reason", "?"));
  }
  return status;
}

std::string format_run_status(const RunStatus& status) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-7s %8s %8s %9s %10s %9s %22s\n", "worker", "state", "round", "step",
                "age s", "tok/s", "loss", "uploaded 24h / cap");
  out += line;
  for (const MemberStatus& m : status.members) {
    std::snprintf(line, sizeof line, "%-12s %-7s %8llu %8llu %9.1f %10.0f %9.4f %10.2f GB (%5.2f%%)", m.worker.c_str(),
                  m.state.c_str(), static_cast<unsigned long long>(m.applied_round),
                  static_cast<unsigned long long>(m.step), m.age_s, m.tokens_per_second,
                  m.last_loss, static_cast<double>(m.bytes_uploaded_24h) / 1e9,
                  100.0 * static_cast<double>(m.bytes_uploaded_24h) / static_cast<double>(status.upload_cap));
    out += line;
    if (m.state != "left" && m.state != "stale") {
      if (const std::optional<double> s = seconds_to_upload_cap(m.bytes_uploaded_24h, m.upload_bytes_per_s, status.upload_cap)) {
        std::snprintf(line, sizeof line, *s > 0 ? "  (reaches the daily upload cap in %.1f h at its rate)"
                                                : "  (AT THE DAILY UPLOAD CAP: Drive refuses its uploads)",
                      *s / 3600.0);
        out += line;
      }
    }
    if (m.clock_ahead_s > 0) out += str("  (its clock runs ", static_cast<int64_t>(m.clock_ahead_s), " s ahead)");
    if (m.files_rejected > 0)
      out += str("  (refused ", m.files_rejected, " files, ", m.unsigned_or_forged_files, " of them unsigned or forged)");
    out += "\n";
  }
  if (status.members.empty()) out += "(no heartbeats yet)\n";
  std::string unsigned_writers;
  for (const MemberStatus& m : status.members)
    if (!m.signed_files) unsigned_writers += (unsigned_writers.empty() ? "" : ", ") + m.worker;
  if (!unsigned_writers.empty())
    out += "UNSIGNED: " + unsigned_writers + " write files without a run secret; anyone who can write to the folder "
           "can inject into this run (Note [Signed files]: --run-secret-file)\n";
  if (!status.sync.empty()) out += "sync: " + status.sync + "\n";
  uint64_t uploaded = 0, tokens = 0;
  for (const MemberStatus& m : status.members) uploaded += m.bytes_uploaded, tokens = std::max(tokens, m.tokens);
  if (tokens > 0) {
    std::snprintf(line, sizeof line, "uploaded: %.1f bytes per token trained (all workers, %.2f GB for %.3g tokens)\n",
                  static_cast<double>(uploaded) / static_cast<double>(tokens), static_cast<double>(uploaded) / 1e9,
                  static_cast<double>(tokens));
    out += line;
  }
  std::snprintf(line, sizeof line, "stale: no heartbeat for %.0f s (%s)\n", status.stale_after_s,
                status.stale_after_from_run ? "the run's --stale-after" : "--stale-after of this command, or its default");
  out += line;
  out += "newest round folder: " + (status.newest_round ? std::to_string(status.newest_round) : std::string("none")) + "\n";
  if (status.checkpoint) {
    std::snprintf(line, sizeof line, "checkpoint: after round %llu, by %s (%.1f MB, %.0f s ago)\n",
                  static_cast<unsigned long long>(status.checkpoint->step), status.checkpoint->publisher.c_str(),
                  static_cast<double>(status.checkpoint->bytes) / 1e6, status.checkpoint->age_s);
    out += line;
  } else {
    out += "checkpoint: none\n";
  }
  const FolderUsage& u = status.usage;
  std::snprintf(line, sizeof line, "folder: %llu files, %.1f MB (round folders: %llu", static_cast<unsigned long long>(u.files),
                static_cast<double>(u.bytes) / 1e6, static_cast<unsigned long long>(u.round_folders));
  out += line;
  if (u.round_folders > 0) {
    std::snprintf(line, sizeof line, ", %llu to %llu, %.1f MB", static_cast<unsigned long long>(u.oldest_round),
                  static_cast<unsigned long long>(status.newest_round), static_cast<double>(u.round_bytes) / 1e6);
    out += line;
  }
  std::snprintf(line, sizeof line, "; checkpoints: %.1f MB)\n", static_cast<double>(u.checkpoint_bytes) / 1e6);
  out += line;
  for (const std::string& u : status.unreadable) out += "unreadable heartbeat: " + u + "\n";
  out += "quarantined files: " + std::to_string(status.quarantined.size()) + "\n";
  for (const std::string& q : status.quarantined) out += "  " + q + "\n";
  return out;
}

}  // namespace gradbox::exchange
