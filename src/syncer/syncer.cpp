#include "syncer/syncer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/disk_space.h"
#include "common/error.h"
#include "common/log.h"
#include "common/paths.h"
#include "wire/envelope.h"

namespace gradbox::syncer {
namespace {

const log::Logger& logger() {
  static const log::Logger l("syncer");
  return l;
}

using mirror::kFlagSuffix;
using mirror::kSentSuffix;

// <rel> with a contract suffix (mirror::kSentSuffix, mirror::kFlagSuffix).
std::string marked(const std::string& rel, std::string_view suffix) { return str(rel, suffix); }

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Regular files under dir, as generic relative paths; tolerant of files vanishing meanwhile.
std::vector<std::string> scan(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec);
  if (ec) return out;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::error_code fec;
    if (it->is_regular_file(fec)) out.push_back(it->path().lexically_relative(dir).generic_string());  // no stat: the file may be gone
  }
  return out;
}

// Removes a temp file on every exit path (a failed transfer included).
struct TempGuard {
  fs::path p;
  ~TempGuard() {
    std::error_code ec;
    fs::remove(p, ec);
  }
};

// Why text is not a JSON object, or "" when it is. Never throws: the text is hand-edited.
std::string json_object_problem(const std::string& text) {
  if (text.size() > mirror::kMaxControlBytes)
    return str(text.size(), " bytes, more than a control file may hold (", mirror::kMaxControlBytes, ")");
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    return j.is_object() ? "" : str("a JSON ", j.type_name(), ", not an object");
  } catch (const nlohmann::json::exception& e) {
    return str("not valid JSON: ", e.what());
  }
}

bool is_control_file(const std::string& rel) { return rel == kControlFile; }
const std::string kControlRel(kControlFile);  // as a task's path

// The worker's requests (Note [The syncer contract]): a request names a file, or a prefix of
// the names of files in its folder. Each folder is read once per listing.
class RequestIndex {
 public:
  explicit RequestIndex(fs::path root) : root_(std::move(root)) {}
  bool wants(const std::string& rel) {
    const fs::path path(rel);
    const std::string dir = path.parent_path().generic_string();
    const std::string name = path.filename().string();
    auto [it, fresh] = folders_.try_emplace(dir);
    if (fresh) {
      std::error_code ec;
      for (fs::directory_iterator f(root_ / dir, ec), end; !ec && f != end; f.increment(ec))
        it->second.push_back(f->path().filename().string());
    }
    for (const std::string& prefix : it->second)
      if (name.starts_with(prefix)) return true;
    return false;
  }

 private:
  fs::path root_;
  std::map<std::string, std::vector<std::string>> folders_;
};

bool is_on_demand(const std::string& rel, const std::vector<std::string>& prefixes) {
  const std::string name = fs::path(rel).filename().string();
  for (const auto& prefix : prefixes)
    if (!prefix.empty() && name.starts_with(prefix)) return true;
  return false;
}

void fsync_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GB_CHECK(fd >= 0, "cannot open ", path.string(), " to fsync");
  int rc = ::fsync(fd);
  ::close(fd);
  GB_CHECK(rc == 0, "cannot fsync ", path.string());
}

}  // namespace

bool is_temp_name(const std::string& rel) { return rel.find(mirror::kTempMarker) != std::string::npos; }

bool is_hidden_name(const std::string& rel) {
  for (const auto& part : fs::path(rel))
    if (!part.empty() && part.string().front() == '.') return true;
  return false;
}

nlohmann::json SyncerStats::to_json() const {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& q : quarantined_files) files.push_back({{"path", q.path}, {"reason", q.reason}});
  return {{"flagged", flagged},
          {"bytes_downloaded", bytes_downloaded},
          {"uploaded", uploaded},
          {"bytes_uploaded", bytes_uploaded},
          {"deleted", deleted},
          {"placeholders_seen", placeholders_seen},
          {"incomplete_seen", incomplete_seen},
          {"corrupt_seen", corrupt_seen},
          {"unsupported_seen", unsupported_seen},
          {"retries", retries},
          {"quarantined", quarantined},
          {"upload_conflicts", upload_conflicts},
          {"transfer_errors", transfer_errors},
          {"control_updates", control_updates},
          {"control_rejected", control_rejected},
          {"passes", passes},
          {"settled_passes", settled_passes},
          {"quarantined_files", files},
          {"sim_faults", nlohmann::json(sim_faults)}};
}

Syncer::Syncer(std::unique_ptr<Backend> backend, SyncerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {
  outbox_ = options_.local / mirror::kOutboxDir;
  inbox_ = options_.local / mirror::kInboxDir;
  quarantine_ = options_.local / mirror::kQuarantineDir;
  stats_path_ = options_.local / mirror::kSyncerStatsFile;
  // requests/ too, so that a ChangeWatch sees a worker's first request (Note [Waking on changes]).
  for (const auto& d : {outbox_, inbox_, quarantine_, options_.local / mirror::kRequestsDir, stats_path_.parent_path()})
    fs::create_directories(d);
}

bool Syncer::try_begin(const std::string& rel) { return in_flight_.insert(rel).second; }

void Syncer::end(const std::string& rel) {
  std::lock_guard lock(mutex_);
  in_flight_.erase(rel);
  auto pass = pass_of_.find(rel);
  if (pass == pass_of_.end()) return;
  --outstanding_[pass->second];
  pass_of_.erase(pass);
  while (!outstanding_.empty() && outstanding_.begin()->second == 0) {
    stats_.settled_passes = outstanding_.begin()->first;
    outstanding_.erase(outstanding_.begin());
    changed();
  }
}

void Syncer::changed() { ++version_; }

bool Syncer::is_own(const std::string& rel) const {
  return own_.count(rel) || path_exists(outbox_ / rel) || path_exists(outbox_ / marked(rel, kSentSuffix));
}

std::vector<Task> Syncer::plan_uploads(PartUploads parts) {
  std::vector<Task> tasks;
  std::vector<std::string> files = scan(outbox_);
  std::lock_guard lock(mutex_);
  // Note [Upload order]: checkpoint parts after the rest, and (the daemon) one at a time.
  bool part_in_flight = std::any_of(in_flight_.begin(), in_flight_.end(),
                                    [](const std::string& rel) { return mirror::is_checkpoint_part(rel); });
  std::vector<std::string> waiting_parts;
  for (const auto& rel : files) {
    // control.json is the operator's, edited in place in the shared folder: never overwritten.
    if (is_temp_name(rel) || rel.ends_with(kSentSuffix) || is_control_file(rel)) continue;
    own_.insert(rel);
    if (conflicts_.count(rel) || path_exists(outbox_ / marked(rel, kSentSuffix))) continue;
    if (mirror::is_checkpoint_part(rel)) {
      if (!in_flight_.count(rel)) waiting_parts.push_back(rel);
    } else if (try_begin(rel)) {
      tasks.push_back({Task::Kind::upload, rel, 0});
    }
  }
  std::sort(waiting_parts.begin(), waiting_parts.end());  // a checkpoint's parts in order
  for (const auto& rel : waiting_parts) {
    if (parts == PartUploads::one_at_a_time && part_in_flight) break;
    if (try_begin(rel)) tasks.push_back({Task::Kind::upload, rel, 0});
    part_in_flight = true;
  }
  return tasks;
}

std::vector<Task> Syncer::plan_removals() {
  std::vector<Task> tasks;
  std::vector<std::string> files = scan(outbox_);
  std::lock_guard lock(mutex_);
  for (const auto& marker : files) {
    if (is_temp_name(marker) || !marker.ends_with(kSentSuffix)) continue;
    std::string rel = marker.substr(0, marker.size() - kSentSuffix.size());
    if (is_control_file(rel)) continue;  // never deleted: it is not ours
    own_.insert(rel);
    if (path_exists(outbox_ / rel)) continue;
    if (try_begin(rel)) tasks.push_back({Task::Kind::remove, rel, 0});
  }
  return tasks;
}

std::vector<Task> Syncer::plan_downloads() {
  std::vector<RemoteEntry> listing;
  try {
    listing = backend_->list();
  } catch (const BackendError& e) {
    note_outage(str("cannot list the shared folder: ", e.what()));  // not a pass
    return {};
  }
  std::optional<std::string> recovered;
  {
    std::lock_guard lock(mutex_);
    if (outage_failures_ > 0) {
      const double seconds = std::chrono::duration<double>(options_.now() - *outage_since_).count();
      recovered = str("the shared folder lists again after ", outage_failures_, " failed calls in ", seconds,
                      " s: carrying on");
      outage_failures_ = 0;
      outage_since_.reset();
    }
  }
  if (recovered) logger().info(*recovered);
  std::map<std::string, uint64_t> entries;  // a listing may repeat an entry
  std::vector<std::pair<std::string, std::string>> not_files;  // where a file belongs: logged once each
  for (auto& e : listing) {
    if (e.kind == RemoteEntry::Kind::file) {
      entries.emplace(e.rel, e.size);
    } else if (!is_temp_name(e.rel) && !is_hidden_name(e.rel)) {
      not_files.emplace_back(e.rel, str(entry_kind_name(e.kind), " where a file belongs: never followed, opened or read"));
    }
  }

  std::vector<Task> tasks;
  std::vector<std::pair<std::string, std::string>> expired;  // placeholders past the deadline
  {
    std::lock_guard lock(mutex_);
    auto control = entries.find(kControlRel);
    if (control == entries.end()) {
      // Gone (or a lagging listing): the inbox copy stays; fetched at once when it is back.
      control_size_.reset();
      control_fetched_.reset();
    } else if (control->second > mirror::kMaxControlBytes) {
      // Never copied: one warning and one count per size it is listed with.
      if (control_oversized_.insert(control->second).second) {
        ++stats_.control_rejected;
        changed();
        logger().warn(str("ignoring ", kControlFile, " in the shared folder: ", control->second,
                          " bytes, more than a control file may hold (", mirror::kMaxControlBytes,
                          "); the previous copy stays"));
      }
    } else {
      const auto now = options_.now();
      const bool due = control_size_ != control->second || !control_fetched_ ||
                       now - *control_fetched_ >= std::chrono::duration<double>(options_.control_refresh_s);
      if (due && try_begin(kControlRel)) tasks.push_back({Task::Kind::control, kControlRel, control->second});
    }
    std::erase_if(not_files, [&](const auto& entry) { return done_.count(entry.first) || is_own(entry.first); });
    RequestIndex requests(options_.local / mirror::kRequestsDir);
    for (const auto& [rel, size] : entries) {
      if (is_control_file(rel)) continue;
      if (is_temp_name(rel) || is_hidden_name(rel) || done_.count(rel) || is_own(rel)) continue;
      if (path_exists(inbox_ / marked(rel, kFlagSuffix)) || path_exists(quarantine_ / rel)) {
        done_.insert(rel);  // flagged or quarantined by an earlier run
        continue;
      }
      if (in_flight_.count(rel)) continue;
      if (is_on_demand(rel, options_.on_demand_prefixes) && !requests.wants(rel)) continue;
      if (size == 0) {  // a placeholder: not worth a download
        DownloadState& st = downloads_[rel];
        if (!st.placeholder_counted) {
          st.placeholder_counted = true;
          ++stats_.placeholders_seen;
          changed();
        }
        auto now = options_.now();
        if (!st.incomplete_since) st.incomplete_since = now;
        if (now - *st.incomplete_since > std::chrono::duration<double>(options_.quarantine_after_s))
          expired.emplace_back(rel, str("still a 0-byte placeholder after ", options_.quarantine_after_s, " s"));
        continue;
      }
      if (try_begin(rel)) tasks.push_back({Task::Kind::download, rel, size});
    }
  }
  for (const auto& [rel, reason] : expired) quarantine(rel, reason, {});
  for (const auto& [rel, reason] : not_files) quarantine(rel, reason, {});
  {
    std::lock_guard lock(mutex_);
    ++stats_.passes;
    // Settled once every download planned by this pass (and the earlier ones) has been tried:
    // the worker waits for that before deciding whether a run exists.
    int downloads = 0;
    for (const Task& t : tasks)
      if (t.kind == Task::Kind::download) pass_of_[t.rel] = stats_.passes, ++downloads;
    if (downloads == 0 && outstanding_.empty()) stats_.settled_passes = stats_.passes;
    else outstanding_[stats_.passes] = downloads;
    changed();
  }
  return tasks;
}

void Syncer::execute(const Task& task) {
  try {
    switch (task.kind) {
      case Task::Kind::upload: do_upload(task.rel); break;
      case Task::Kind::remove: do_remove(task.rel); break;
      case Task::Kind::download: do_download(task.rel); break;
      case Task::Kind::control: do_control_download(task); break;
    }
  } catch (const std::exception& e) {
    if (note_if_disk_full(e)) return end(task.rel);
    // Backend failures and local I/O errors alike: counted, logged, retried on a later poll.
    const char* verb = task.kind == Task::Kind::upload   ? "upload of "
                       : task.kind == Task::Kind::remove ? "deletion of "
                                                         : "download of ";
    const std::string what = str(verb, task.rel, " failed (retrying later): ", e.what());
    if (dynamic_cast<const SharedFolderGone*>(&e)) {
      note_outage(what);  // one warning for the whole outage, not one per file and poll
    } else {
      logger().warn(what);
      std::lock_guard lock(mutex_);
      ++stats_.transfer_errors;
      changed();
    }
  }
  end(task.rel);
}

bool Syncer::note_if_disk_full(const std::exception& e) {
  std::string path;
  if (!is_disk_full(e, &path)) return false;
  // A path-less error (a std::system_error) comes from a local call: the backends name theirs.
  const bool ours = path.empty() || is_within(path, options_.local);
  std::lock_guard lock(mutex_);
  ++stats_.transfer_errors;
  changed();
  if (ours) {
    if (local_disk_full_) return true;
    local_disk_full_ = e.what();
    logger().error(str("the local disk is full: ", e.what(), "; stopping (the worker reports it and stops too)"));
  } else if (!shared_full_warned_) {
    shared_full_warned_ = true;
    logger().warn(str("the shared folder is full: ", e.what(), " (uploads are retried every poll)"));
  }
  return true;
}

std::optional<std::string> Syncer::local_disk_full() const {
  std::lock_guard lock(mutex_);
  return local_disk_full_;
}

void Syncer::note_outage(const std::string& what) {
  bool first;
  {
    std::lock_guard lock(mutex_);
    ++stats_.transfer_errors;
    changed();
    first = outage_failures_++ == 0;
    if (first) outage_since_ = options_.now();
  }
  if (first)
    logger().warn(str(what, " (retrying every poll; passes stand still until the shared folder lists again)"));
  else
    logger().debug(what);
}

void Syncer::do_upload(const std::string& rel) {
  const fs::path local = outbox_ / rel;
  std::error_code ec;
  uint64_t size = fs::file_size(local, ec);
  if (ec) return;  // garbage-collected meanwhile
  std::optional<uint64_t> remote = backend_->stat(rel);
  bool resumed = false;
  if (remote && *remote < size) {
    // Our own interrupted upload (kill -9 mid-write)? Then its bytes are a prefix of ours.
    fs::path tmp = stats_path_.parent_path() / str("resume", mirror::kTempMarker, ".", ::getpid());
    backend_->download(rel, tmp);
    std::string theirs = read_file(tmp), ours = read_file(local);
    fs::remove(tmp, ec);
    if (theirs.size() < ours.size() && ours.compare(0, theirs.size(), theirs) == 0) {
      backend_->upload(local, rel, UploadMode::complete_own_partial);
      resumed = true;
      logger().info(str("completed interrupted upload of ", rel, " (", theirs.size(), " of ", size, " bytes were there)"));
    }
  }
  if (remote && !resumed && *remote != size) {
    std::lock_guard lock(mutex_);
    if (conflicts_.insert(rel).second) {
      ++stats_.upload_conflicts;
      changed();
      logger().error(str("not uploading ", rel, ": the shared folder already holds a different file of ", *remote,
                         " bytes under that name (ours has ", size, "); write-once means it is never overwritten"));
    }
    return;
  }
  if (!remote) backend_->upload(local, rel, UploadMode::create_new);
  write_file_atomic(outbox_ / marked(rel, kSentSuffix), "");
  std::lock_guard lock(mutex_);
  shared_full_warned_ = false;
  if (remote && !resumed) {
    logger().info(str(rel, " is already in the shared folder with the same size: marked sent"));
  } else {
    ++stats_.uploaded;
    stats_.bytes_uploaded += size;
    logger().debug(str("uploaded ", rel, " (", size, " bytes)"));
  }
  changed();
}

void Syncer::do_remove(const std::string& rel) {
  backend_->remove(rel);
  std::error_code ec;
  fs::remove(outbox_ / marked(rel, kSentSuffix), ec);
  try {
    backend_->remove_empty_dirs(parent_rel(rel));
  } catch (const BackendError& e) {
    logger().debug(str("could not remove empty folders above ", rel, ": ", e.what()));
  }
  std::lock_guard lock(mutex_);
  ++stats_.deleted;
  changed();
  logger().debug(str("deleted ", rel, " from the shared folder"));
}

void Syncer::do_download(const std::string& rel) {
  const fs::path final_path = inbox_ / rel;
  const fs::path tmp = inbox_ / str(rel, mirror::kTempMarker, ".", ::getpid());
  fs::create_directories(final_path.parent_path());
  {
    std::lock_guard lock(mutex_);
    if (downloads_[rel].failed_attempts > 0) {
      ++stats_.retries;
      changed();
    }
  }
  // Header first, where the backend can look: a file still being written is not copied whole
  // (again and again) to find that out. Anything else, and an overdue file (quarantined with
  // its bytes), is for the full download and verification to judge.
  if (std::optional<RemoteHead> head = backend_->head(rel, wire::kPreambleSize)) {
    uint64_t looked = head->bytes.size();
    if (head->bytes.size() == wire::kPreambleSize && wire::head_size(head->bytes) <= head->size) {
      head = backend_->head(rel, wire::head_size(head->bytes));
      looked += head->bytes.size();
    }
    {
      std::lock_guard lock(mutex_);
      stats_.bytes_downloaded += looked;
    }
    const wire::Verification early = wire::verify_head(head->bytes, head->size);
    if (early.state == wire::FileState::incomplete && !incomplete_overdue(rel))
      return note_incomplete(rel, early.reason, {});
    if (early.hopeless) return quarantine(rel, early.reason, {});  // once: no copy of it can be better
  }
  TempGuard guard{tmp};
  backend_->download(rel, tmp);
  std::error_code ec;
  uint64_t size = fs::file_size(tmp, ec);
  wire::Verification v = wire::verify_file(tmp);
  {
    std::lock_guard lock(mutex_);
    stats_.bytes_downloaded += size;
    changed();
  }
  switch (v.state) {
    case wire::FileState::complete: {
      fsync_file(tmp);
      fs::rename(tmp, final_path);
      fsync_dir(final_path.parent_path());
      write_file_atomic(inbox_ / marked(rel, kFlagSuffix), "");
      std::lock_guard lock(mutex_);
      done_.insert(rel);
      downloads_.erase(rel);
      ++stats_.flagged;
      changed();
      logger().debug(str("flagged ", rel, " (", size, " bytes)"));
      return;
    }
    case wire::FileState::incomplete: return note_incomplete(rel, v.reason, tmp);
    // Unsupported is retried like corrupt: the frame-version field sits outside both checksums,
    // so one damaged byte in a copy can make a good file look newer. A file that really is newer
    // stays so and is quarantined after --max-attempts downloads.
    case wire::FileState::corrupt:
    case wire::FileState::unsupported: {
      const char* what = v.state == wire::FileState::corrupt ? "corrupt" : "unsupported";
      int attempts;
      {
        std::lock_guard lock(mutex_);
        ++(v.state == wire::FileState::corrupt ? stats_.corrupt_seen : stats_.unsupported_seen);
        DownloadState& st = downloads_[rel];
        ++st.failed_attempts;
        attempts = ++st.corrupt_attempts;
        changed();
      }
      if (attempts >= options_.max_attempts)
        quarantine(rel, str(what, " after ", attempts, " attempts: ", v.reason), tmp);
      else
        logger().info(str(rel, " is ", what, " (", v.reason, "), attempt ", attempts, " of ", options_.max_attempts));
      return;
    }
  }
}

bool Syncer::incomplete_overdue(const std::string& rel) {
  std::lock_guard lock(mutex_);
  auto it = downloads_.find(rel);
  return it != downloads_.end() && it->second.incomplete_since &&
         options_.now() - *it->second.incomplete_since > std::chrono::duration<double>(options_.quarantine_after_s);
}

void Syncer::note_incomplete(const std::string& rel, const std::string& reason, const fs::path& bad_bytes) {
  bool expired;
  {
    std::lock_guard lock(mutex_);
    ++stats_.incomplete_seen;
    DownloadState& st = downloads_[rel];
    ++st.failed_attempts;
    auto now = options_.now();
    if (!st.incomplete_since) st.incomplete_since = now;
    expired = now - *st.incomplete_since > std::chrono::duration<double>(options_.quarantine_after_s);
    changed();
  }
  if (expired)
    quarantine(rel, str("still incomplete after ", options_.quarantine_after_s, " s: ", reason), bad_bytes);
  else
    logger().debug(str(rel, " is incomplete (", reason, "): retrying later"));
}

void Syncer::do_control_download(const Task& task) {
  const fs::path final_path = inbox_ / kControlFile;
  const fs::path tmp = inbox_ / str(kControlFile, mirror::kTempMarker, ".", ::getpid());
  TempGuard guard{tmp};
  backend_->download_copy(task.rel, tmp);  // edited in place: a copy of its own
  const std::string text = read_file(tmp);
  const std::string problem = json_object_problem(text);
  std::optional<std::string> current;
  if (path_exists(final_path)) current = read_file(final_path);
  const bool update = problem.empty() && current != text;
  if (update) {
    fsync_file(tmp);
    fs::rename(tmp, final_path);
    fsync_dir(inbox_);
  }
  bool warn = false;
  {
    std::lock_guard lock(mutex_);
    stats_.bytes_downloaded += text.size();
    control_size_ = task.listed_size;
    control_fetched_ = options_.now();
    if (update) ++stats_.control_updates;
    // A broken edit stays broken for many refreshes: one warning and one count per content.
    if (!problem.empty() && control_rejected_.insert(checksum64(text.data(), text.size())).second) {
      ++stats_.control_rejected;
      warn = true;
    }
    changed();
  }
  if (update) logger().info(str("new ", kControlFile, " (", text.size(), " bytes) in the inbox"));
  if (warn)
    logger().warn(str("ignoring ", kControlFile, " in the shared folder (", problem,
                      "): the previous copy stays until it is fixed"));
}

void Syncer::quarantine(const std::string& rel, const std::string& reason, const fs::path& bad_bytes) {
  const fs::path dest = quarantine_ / rel;
  fs::create_directories(dest.parent_path());
  write_file_atomic(dest, bad_bytes.empty() ? std::string() : read_file(bad_bytes));
  logger().warn(str("quarantined ", rel, " (kept in ", dest.string(), "): ", reason));
  std::lock_guard lock(mutex_);
  done_.insert(rel);
  downloads_.erase(rel);
  ++stats_.quarantined;
  stats_.quarantined_files.push_back({rel, reason});
  changed();
}

void Syncer::final_pass() {
  for (const auto& t : plan_uploads(PartUploads::all)) execute(t);
  for (const auto& t : plan_removals()) execute(t);
  write_stats_if_changed();
}

void Syncer::run_pass() {
  for (const auto& t : plan_uploads(PartUploads::all)) execute(t);
  for (const auto& t : plan_removals()) execute(t);
  for (const auto& t : plan_downloads()) execute(t);
  write_stats_if_changed();
}

std::vector<fs::path> Syncer::watch_roots() const {
  std::vector<fs::path> roots{options_.local / mirror::kOutboxDir, options_.local / mirror::kRequestsDir};
  if (std::optional<fs::path> shared = backend_->watchable_root()) roots.push_back(*shared);
  return roots;
}

SyncerStats Syncer::stats() const {
  SyncerStats s;
  {
    std::lock_guard lock(mutex_);
    s = stats_;
  }
  s.sim_faults = backend_->fault_counts();
  return s;
}

void Syncer::write_stats_if_changed(bool throttle) {
  static std::mutex write_mutex;  // one writer at a time (transfers finish on several threads)
  std::lock_guard write_lock(write_mutex);
  const auto now = std::chrono::steady_clock::now();
  if (throttle && now - last_stats_write_ < std::chrono::seconds(1)) return;
  std::string text = stats().to_json().dump(2);
  std::lock_guard lock(mutex_);
  if (text == last_stats_) return;
  replace_file(stats_path_, text + "\n");
  last_stats_ = std::move(text);
  last_stats_write_ = now;
}

}  // namespace gradbox::syncer
