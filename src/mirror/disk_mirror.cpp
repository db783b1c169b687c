#include "mirror/disk_mirror.h"

#include <sys/stat.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "mirror/sync_contract.h"

namespace gradbox::mirror {
namespace {

namespace fs = std::filesystem;

bool path_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

std::string with(const std::string& rel, std::string_view suffix) { return rel + std::string(suffix); }

bool is_marker_or_temp(const std::string& name) {
  return name.ends_with(kSentSuffix) || name.ends_with(kFlagSuffix) || name.find(kTempMarker) != std::string::npos;
}

// The flag's modification time is when the syncer finished verifying the file: this machine's
// clock, never the writer's.
int64_t mtime_unix_ms(const fs::path& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

bool read_if_exists(const fs::path& path, std::string& out) {
  if (!path_exists(path)) return false;
  try {
    read_file_into(path, out);
    return true;
  } catch (const InputError&) {
    return false;  // removed between the check and the read
  }
}

std::optional<std::string> read_if_exists(const fs::path& path) {
  std::string bytes;
  if (!read_if_exists(path, bytes)) return std::nullopt;
  return bytes;
}

// Removes own files under dir, keeping the syncer's .sent markers (they tell it what to delete
// from the shared folder); removes folders left empty.
void withdraw_tree(const fs::path& dir) {
  std::error_code ec;
  bool empty = true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) {
      withdraw_tree(it->path());
      if (path_exists(it->path())) empty = false;
    } else if (it->path().filename().string().ends_with(kSentSuffix)) {
      empty = false;
    } else {
      fs::remove(it->path(), ec);
    }
  }
  if (empty) fs::remove(dir, ec);
}

}  // namespace

DiskMirror::DiskMirror(fs::path local)
    : local_(std::move(local)),
      outbox_(local_ / kOutboxDir),
      inbox_(local_ / kInboxDir),
      requests_(local_ / kRequestsDir) {
  fs::create_directories(outbox_);
  fs::create_directories(inbox_);
}

void DiskMirror::publish(const std::string& rel, std::string_view bytes) {
  const fs::path path = outbox_ / rel;
  GB_CHECK(!path_exists(path), path.string(), ": already published (files in the shared folder are written once)");
  fs::create_directories(path.parent_path());
  write_file_atomic(path, bytes);
}

bool DiskMirror::published(const std::string& rel) { return path_exists(outbox_ / rel); }

std::optional<std::string> DiskMirror::read_published(const std::string& rel) { return read_if_exists(outbox_ / rel); }

std::vector<std::string> DiskMirror::list_published(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(outbox_ / dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code fec;
    if (it->is_regular_file(fec) && !is_marker_or_temp(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool DiskMirror::landed(const std::string& rel) { return path_exists(outbox_ / with(rel, kSentSuffix)); }

void DiskMirror::withdraw(const std::string& rel) {
  const fs::path path = outbox_ / rel;
  std::error_code ec;
  if (fs::is_directory(path, ec)) withdraw_tree(path);
  else fs::remove(path, ec);
}

std::vector<Arrival> DiskMirror::list(const std::string& dir) {
  std::vector<Arrival> files;
  const fs::path folder = inbox_ / dir;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with(kFlagSuffix)) continue;
    files.push_back({name.substr(0, name.size() - kFlagSuffix.size()), mtime_unix_ms(it->path())});
  }
  std::sort(files.begin(), files.end(), [](const Arrival& a, const Arrival& b) { return a.name < b.name; });
  return files;
}

std::vector<std::string> DiskMirror::list_dirs(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::path& side : {inbox_, outbox_}) {
    std::error_code ec;
    for (fs::directory_iterator it(side / dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code dec;
      if (it->is_directory(dec)) names.push_back(it->path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::optional<std::string> DiskMirror::read(const std::string& rel) {
  std::string bytes;
  if (!read_into(rel, bytes)) return std::nullopt;
  return bytes;
}

bool DiskMirror::read_into(const std::string& rel, std::string& out) {
  if (!path_exists(inbox_ / with(rel, kFlagSuffix))) return false;  // never a file still arriving
  return read_if_exists(inbox_ / rel, out);
}

bool DiskMirror::read_published_into(const std::string& rel, std::string& out) { return read_if_exists(outbox_ / rel, out); }

void DiskMirror::request(const std::string& rel) {
  const fs::path path = requests_ / rel;
  if (path_exists(path)) return;
  fs::create_directories(path.parent_path());
  write_file_atomic(path, "");
}

void DiskMirror::forget(const std::string& rel) {
  std::error_code ec;
  const fs::path copy = inbox_ / rel;
  if (fs::is_directory(copy, ec)) {
    fs::remove_all(copy, ec);
  } else {
    fs::remove(inbox_ / with(rel, kFlagSuffix), ec);  // the flag first: never a flag without its file
    fs::remove(copy, ec);
  }
  fs::remove_all(requests_ / rel, ec);
}

std::optional<std::string> DiskMirror::control() { return read_if_exists(inbox_ / kControlFile); }

uint64_t DiskMirror::settled_passes() {
  const std::optional<std::string> text = read_if_exists(local_ / kSyncerStatsFile);
  if (!text) return 0;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_object() ? j.value("settled_passes", uint64_t{0}) : 0;
}

std::string DiskMirror::where(const std::string& rel) const {
  return (path_exists(outbox_ / rel) ? outbox_ / rel : inbox_ / rel).string();
}

}  // namespace gradbox::mirror
