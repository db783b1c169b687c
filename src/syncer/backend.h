#pragma once
// Where the shared folder lives, behind one small interface: a mounted directory (Drive mount,
// NFS), an rclone remote, or the cloud-folder simulator. Paths are relative ("rel") with '/'
// separators. Failures of a call (network, timeout, file gone) throw BackendError; the syncer
// catches them per transfer and tries again on a later poll.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gradbox::syncer {

namespace fs = std::filesystem;

struct RemoteEntry {
  // What a listing may show where a file belongs. Only files are ever read: a symbolic link is
  // never followed (it could name any file on the syncer's machine), and a directory named like
  // a file (or a fifo, a device) is reported, never entered or opened.
  enum class Kind { file, link, directory, other };
  std::string rel;
  uint64_t size = 0;
  Kind kind = Kind::file;
};
const char* entry_kind_name(RemoteEntry::Kind kind);  // "a symbolic link", ...

// A file's first bytes and its size at the time they were read.
struct RemoteHead {
  std::string bytes;
  uint64_t size = 0;
};

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The shared folder itself is missing (an unmounted drive, a deleted run folder). Backends never
// recreate it; the syncer logs one line per outage for these and retries on every poll.
class SharedFolderGone : public BackendError {
 public:
  using BackendError::BackendError;
};

// How an upload may treat an existing file at the destination.
enum class UploadMode {
  create_new,         // fail if the destination exists (the normal, write-once case)
  complete_own_partial,  // the destination is a prefix of our own interrupted upload: finish it
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Every file under the shared folder, recursively (may be lagging, partial or duplicated).
  virtual std::vector<RemoteEntry> list() = 0;
  // Size of one file as the writer sees it, or nullopt when absent.
  virtual std::optional<uint64_t> stat(const std::string& rel) = 0;
  // Up to max_bytes from the start of SHARED/rel and its size now, so that a file still being
  // written is not copied whole to learn that; nullopt where looking costs a download anyway
  // (rclone: a process per look; the simulator, whose partial copies the download path meets).
  virtual std::optional<RemoteHead> head(const std::string& /*rel*/, size_t /*max_bytes*/) { return std::nullopt; }
  // SHARED/rel to local_path (created or replaced). For a write-once file: the local file may
  // share its bytes with the shared one (a hard link, Note [Hard-linked transfers]).
  virtual void download(const std::string& rel, const fs::path& local_path) = 0;
  // The same for a file edited in place (the control file): a copy of its own, which a later
  // edit in the shared folder does not reach until it is downloaded again.
  virtual void download_copy(const std::string& rel, const fs::path& local_path) { download(rel, local_path); }
  virtual void upload(const fs::path& local_path, const std::string& rel, UploadMode mode) = 0;
  // Deletes SHARED/rel; a file already gone is not an error.
  virtual void remove(const std::string& rel) = 0;
  // Best effort: removes rel_dir and its ancestors (never the root) while they are empty.
  virtual void remove_empty_dirs(const std::string& rel_dir) = 0;
  // Injected faults by kind (the simulator); empty for real backends.
  virtual std::map<std::string, uint64_t> fault_counts() const { return {}; }
  // The shared folder as a directory of this machine whose changes the kernel can report (Note
  // [Waking on changes] in syncer/change_watch.h); nullopt where only listing shows them.
  virtual std::optional<fs::path> watchable_root() const { return std::nullopt; }
};

// "a/b/c" -> "a/b"; "c" -> "".
std::string parent_rel(const std::string& rel);
// Throws BackendError unless rel is a clean relative path (no "..", no leading '/').
void check_rel(const std::string& rel);

}  // namespace gradbox::syncer
