#include "syncer/rclone_backend.h"

#include <cerrno>

#include <nlohmann/json.hpp>

#include "common/disk_space.h"
#include "common/error.h"
#include "syncer/subprocess.h"

namespace gradbox::syncer {
namespace {

// rclone's exit codes 3 (directory not found) and 4 (file not found).
bool is_not_found(const SubprocessResult& r) { return r.exit_code == 3 || r.exit_code == 4; }

std::string last_lines(const std::string& text, size_t max_chars = 600) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t.size() > max_chars ? "..." + t.substr(t.size() - max_chars) : t;
}

}  // namespace

RcloneBackend::RcloneBackend(std::string remote, std::string rclone_binary, double timeout_seconds)
    : remote_(std::move(remote)), binary_(std::move(rclone_binary)), timeout_seconds_(timeout_seconds) {
  while (remote_.size() > 1 && remote_.back() == '/') remote_.pop_back();
}

std::string RcloneBackend::remote_path(const std::string& rel) const {
  if (rel.empty()) return remote_;
  if (!remote_.empty() && (remote_.back() == ':' || remote_.back() == '/')) return remote_ + rel;
  return remote_ + "/" + rel;
}

std::string RcloneBackend::run(std::vector<std::string> args, bool allow_not_found, bool* not_found) {
  std::vector<std::string> argv{binary_};
  argv.insert(argv.end(), args.begin(), args.end());
  // One attempt per call (the syncer retries on its next poll), quiet stderr except errors.
  for (const char* a : {"--retries", "1", "--low-level-retries", "2", "-q"}) argv.push_back(a);
  SubprocessResult r = run_subprocess(argv, timeout_seconds_);
  if (not_found) *not_found = false;
  if (r.timed_out)
    throw BackendError(str("rclone ", args.at(0), " timed out after ", timeout_seconds_, " s: ", last_lines(r.err)));
  if (r.exit_code != 0) {
    if (allow_not_found && is_not_found(r)) {
      if (not_found) *not_found = true;
      return {};
    }
    throw BackendError(str("rclone ", args.at(0), " exited ", r.exit_code, ": ", last_lines(r.err)));
  }
  return r.out;
}

std::vector<RemoteEntry> RcloneBackend::list() {
  bool missing = false;
  std::string out = run({"lsjson", "-R", "--files-only", remote_}, true, &missing);
  std::vector<RemoteEntry> entries;
  if (missing) return entries;  // the folder does not exist yet: nothing shared
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception& e) {
    throw BackendError(str("rclone lsjson printed unparsable JSON: ", e.what()));
  }
  if (!doc.is_array()) throw BackendError("rclone lsjson did not print a JSON array");
  for (const auto& item : doc) {
    if (item.value("IsDir", false)) continue;
    int64_t size = item.value("Size", int64_t{-1});
    entries.push_back({item.at("Path").get<std::string>(), size < 0 ? 0 : static_cast<uint64_t>(size)});
  }
  return entries;
}

std::optional<uint64_t> RcloneBackend::stat(const std::string& rel) {
  check_rel(rel);
  if (stat_flag_) {
    try {
      bool missing = false;
      std::string out = run({"lsjson", "--stat", remote_path(rel)}, true, &missing);
      if (missing) return std::nullopt;
      return size_of(nlohmann::json::parse(out), rel);
    } catch (const nlohmann::json::exception& e) {
      throw BackendError(str("rclone lsjson --stat printed unparsable JSON: ", e.what()));
    } catch (const BackendError& e) {
      if (std::string(e.what()).find("unknown flag: --stat") == std::string::npos) throw;
      stat_flag_ = false;  // rclone before 1.55 (Debian 11's and Ubuntu 22.04's 1.53)
    }
  }
  // Listing a file's path lists that file alone, in every version.
  bool missing = false;
  std::string out = run({"lsjson", remote_path(rel)}, true, &missing);
  if (missing) return std::nullopt;
  try {
    const nlohmann::json doc = nlohmann::json::parse(out);
    const std::string name = fs::path(rel).filename().string();
    if (!doc.is_array()) throw BackendError(str("rclone lsjson ", remote_path(rel), " did not print a JSON array"));
    if (doc.size() != 1 || doc[0].value("Name", std::string()) != name)
      throw BackendError(str(remote_path(rel), " is a directory"));
    return size_of(doc[0], rel);
  } catch (const nlohmann::json::exception& e) {
    throw BackendError(str("rclone lsjson printed unparsable JSON: ", e.what()));
  }
}

uint64_t RcloneBackend::size_of(const nlohmann::json& entry, const std::string& rel) const {
  if (entry.value("IsDir", false)) throw BackendError(str(remote_path(rel), " is a directory"));
  const int64_t size = entry.value("Size", int64_t{-1});
  return size < 0 ? 0 : static_cast<uint64_t>(size);
}

void RcloneBackend::download(const std::string& rel, const fs::path& local_path) {
  check_rel(rel);
  try {
    run({"copyto", remote_path(rel), local_path.string()}, false, nullptr);
  } catch (const BackendError& e) {
    // rclone says so only in words (Go's "no space left on device"); Note [A full disk].
    const std::string what = e.what();
    if (what.find("no space left on device") != std::string::npos || what.find("disk quota exceeded") != std::string::npos)
      throw DiskFullError(local_path.string(), disk_full_message(local_path, ENOSPC));
    throw;
  }
}

void RcloneBackend::upload(const fs::path& local_path, const std::string& rel, UploadMode mode) {
  check_rel(rel);
  std::vector<std::string> args{"copyto", local_path.string(), remote_path(rel)};
  // Write-once: the caller checked the name is free; --ignore-existing closes the race window.
  // Completing our own interrupted upload replaces the partial object (rclone cannot append).
  if (mode == UploadMode::create_new) args.push_back("--ignore-existing");
  run(args, false, nullptr);
}

void RcloneBackend::remove(const std::string& rel) {
  check_rel(rel);
  bool missing = false;
  try {
    run({"deletefile", remote_path(rel)}, true, &missing);
  } catch (const BackendError&) {
    if (stat(rel)) throw;  // deletefile reports a missing file as a plain error
  }
}

void RcloneBackend::remove_empty_dirs(const std::string& rel_dir) {
  for (std::string dir = rel_dir; !dir.empty(); dir = parent_rel(dir)) {
    try {
      run({"rmdir", remote_path(dir)}, false, nullptr);  // fails when not empty: stop there
    } catch (const BackendError&) {
      return;
    }
  }
}

}  // namespace gradbox::syncer
