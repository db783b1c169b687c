#pragma once
// The shared folder as a plain directory (a Drive/NFS mount). Uploads write the final name
// directly, created exclusively (write-once; cloud mounts have lost renames); a reader that sees
// the file half-written gets `incomplete` from wire::verify and retries later.
//
// The backend never creates the root: a missing one is an unmounted drive or a deleted run
// folder, and a new empty folder in its place would let the worker go on alone in it. Every call
// that meets a missing root throws SharedFolderGone; upload() makes only sub-folders below it.
#include "syncer/backend.h"

namespace gradbox::syncer {

class MountedBackend : public Backend {
 public:
  // Note [Hard-linked transfers] in mounted_backend.cpp: links where the file system allows, or
  // always copies (the cloud-folder simulator, whose lag counts from a file's landing, its mtime).
  enum class Transfers { link_where_possible, copy };
  explicit MountedBackend(fs::path root, Transfers transfers = Transfers::link_where_possible);
  std::string name() const override { return "mounted"; }
  std::vector<RemoteEntry> list() override;
  std::optional<uint64_t> stat(const std::string& rel) override;
  std::optional<RemoteHead> head(const std::string& rel, size_t max_bytes) override;
  void download(const std::string& rel, const fs::path& local_path) override;
  void download_copy(const std::string& rel, const fs::path& local_path) override;
  void upload(const fs::path& local_path, const std::string& rel, UploadMode mode) override;
  void remove(const std::string& rel) override;
  void remove_empty_dirs(const std::string& rel_dir) override;
  std::optional<fs::path> watchable_root() const override { return root_; }
  const fs::path& root() const { return root_; }

 private:
  void require_root() const;                       // throws SharedFolderGone unless it is a folder
  void make_dirs(const std::string& rel_dir) const;  // one mkdir per level below the root
  fs::path root_;
  Transfers transfers_;
};

// Copies `from` to `to` (created or truncated), fsyncs it. `limit` caps the bytes copied.
// Throws BackendError naming the file.
uint64_t copy_file_bytes(const fs::path& from, const fs::path& to, uint64_t limit = UINT64_MAX);

}  // namespace gradbox::syncer
