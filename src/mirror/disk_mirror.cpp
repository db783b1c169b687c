#include "mirror/disk_mirror.h"

#include <sys/stat.h>
#include <unistd.h>

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

uint64_t size_of(const fs::path& path) {
  struct ::stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string recycled_prefix() { return std::to_string(::getpid()) + "."; }

}  // namespace

// Note [Recycled files]
// A round's files are written once, read by peers, and withdrawn a few rounds later; the next
// round writes as many bytes again. Writing a new file takes fresh pages for the page cache,
// and exchange_bench found that the round's largest cost after the codec: a new file is
// written at a third of the speed of one written over (3 workers on this machine's 2 cores;
// the pages freed with the old files had gone back to the host). So a withdrawn file large
// enough to matter moves to LOCAL/recycled instead of being deleted, and the next large
// publish renames one to its temp name and writes over it (AtomicFileWriter's reuse): the same
// pages, still atomic for readers, cut to its new size at commit. Two rules keep this safe:
//   - only a file that has landed (.sent): the syncer has finished reading it, so nobody is
//     copying bytes that are about to change;
//   - only a file that no other name shares (st_nlink == 1): with hard-linked transfers (Note
//     [Hard-linked transfers] in syncer/mounted_backend.cpp) the shared folder's copy and
//     peers' inbox copies are this inode until they are deleted, so one still linked waits.
// At most kMaxRecycled are kept, the oldest deleted first; files an earlier life left there are
// deleted at start, and the rest when the mirror is destroyed.
DiskMirror::DiskMirror(fs::path local)
    : local_(std::move(local)),
      outbox_(local_ / kOutboxDir),
      inbox_(local_ / kInboxDir),
      requests_(local_ / kRequestsDir),
      recycled_(local_ / kRecycledDir) {
  fs::create_directories(outbox_);
  fs::create_directories(inbox_);
  fs::create_directories(recycled_);
  std::error_code ec;
  for (fs::directory_iterator it(recycled_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code rec;
    if (!it->path().filename().string().starts_with(recycled_prefix())) fs::remove_all(it->path(), rec);
  }
}

DiskMirror::~DiskMirror() {
  std::error_code ec;
  for (const Recycled& r : recycled_list_) fs::remove(r.path, ec);
}

void DiskMirror::publish(const std::string& rel, std::string_view bytes) {
  const std::string_view pieces[] = {bytes};
  publish_pieces(rel, pieces);
}

void DiskMirror::publish_pieces(const std::string& rel, std::span<const std::string_view> pieces) {
  const fs::path path = outbox_ / rel;
  GB_CHECK(!path_exists(path), path.string(), ": already published (files in the shared folder are written once)");
  fs::create_directories(path.parent_path());
  uint64_t size = 0;
  for (std::string_view piece : pieces) size += piece.size();
  const std::optional<fs::path> reuse = size >= kRecycleMinBytes ? take_recycled(size) : std::nullopt;
  AtomicFileWriter writer(path, reuse);
  writer.write(pieces);
  writer.commit();
  if (writer.reused()) {
    std::lock_guard lock(recycle_mutex_);
    ++publishes_recycled_;
  }
}

// Note [Recycled files]: of those no other name shares, the smallest that holds `size` bytes
// (no page of it allocated afresh), else the largest.
std::optional<fs::path> DiskMirror::take_recycled(uint64_t size) {
  std::lock_guard lock(recycle_mutex_);
  auto best = recycled_list_.end();
  for (auto it = recycled_list_.begin(); it != recycled_list_.end(); ++it) {
    struct ::stat st {};
    if (::stat(it->path.c_str(), &st) != 0 || st.st_nlink != 1) continue;
    if (best == recycled_list_.end()) {
      best = it;
      continue;
    }
    const bool fits = it->size >= size, best_fits = best->size >= size;
    if (fits != best_fits ? fits : (fits ? it->size < best->size : it->size > best->size)) best = it;
  }
  if (best == recycled_list_.end()) return std::nullopt;
  fs::path path = best->path;
  recycled_list_.erase(best);
  return path;
}

size_t DiskMirror::recycled_files() const {
  std::lock_guard lock(recycle_mutex_);
  return recycled_list_.size();
}

uint64_t DiskMirror::publishes_recycled() const {
  std::lock_guard lock(recycle_mutex_);
  return publishes_recycled_;
}

// Note [Recycled files]: kept when large and landed, else deleted. Not a checkpoint's parts:
// they come in bursts of GBs that no round writes again soon.
void DiskMirror::withdraw_file(const fs::path& path) {
  std::error_code ec;
  const uint64_t size = size_of(path);
  if (size >= kRecycleMinBytes && path_exists(path.string() + std::string(kSentSuffix)) &&
      !is_checkpoint_part(path.lexically_relative(outbox_).generic_string())) {
    std::lock_guard lock(recycle_mutex_);
    const fs::path kept = recycled_ / (recycled_prefix() + std::to_string(recycle_seq_++));
    if (::rename(path.c_str(), kept.c_str()) == 0) {
      recycled_list_.push_back({kept, size});
      while (recycled_list_.size() > kMaxRecycled) {
        fs::remove(recycled_list_.front().path, ec);
        recycled_list_.erase(recycled_list_.begin());
      }
      return;
    }
  }
  fs::remove(path, ec);
}

// Withdraws own files under dir, keeping the syncer's .sent markers (they tell it what to
// delete from the shared folder); removes folders left empty.
void DiskMirror::withdraw_tree(const fs::path& dir) {
  std::error_code ec;
  bool empty = true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) {
      withdraw_tree(it->path());
      if (path_exists(it->path())) empty = false;
    } else if (it->path().filename().string().ends_with(kSentSuffix)) {
      empty = false;
    } else {
      withdraw_file(it->path());
    }
  }
  if (empty) fs::remove(dir, ec);
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
  else withdraw_file(path);
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
