#pragma once
// Training checkpoints shared through the folder, through the seam (Note [The seam] in
// mirror/mirror.h): the shared folder only as a mirror::Mirror, time only as a mirror::Clock.
//
// Note [Folder checkpoints]
// A checkpoint is published as the files of a local checkpoint folder (worker/checkpoint.h:
// model.safetensors, optimizer.safetensors, state.json, manifest.json), cut into slices:
//
//   checkpoints/s<step %08d>-e<epoch>-<publisher>/part-<i %04d>.gbx   CheckpointPart: one slice
//                                                                     (at most part_bytes) of one file
//   checkpoints/s<step %08d>-e<epoch>-<publisher>/manifest.gbx        CheckpointManifest: step, tokens,
//                                                                     every file (size, XXH3) and part
//
// Manifest last: the publisher publishes every part at once (Mirror::publish), and the manifest
// only once each of them has landed in the shared folder (Mirror::landed). The caller polls that
// state machine once per round, so training never waits for an upload. A manifest in the folder
// therefore means its parts are there too (unless they are being pruned).
//
// Readers: manifests are small and every syncer mirrors them; parts are fetched on demand
// (names starting with "part-", kCheckpointPartPrefix in mirror/sync_contract.h: only once the
// reader has Mirror::request()ed them). A checkpoint is complete only when its manifest verifies
// and belongs to this run, every part it lists is whole and verified in the mirror
// (Mirror::list) and pinned by its payload checksum, and the reassembled files have the
// manifest's sizes and checksums. A newer checkpoint still uploading (or broken) never hides an
// older complete one: the caller walks list_folder_checkpoints() newest first. A worker's own
// checkpoints are read back from its own published files.
//
// Pruning: only the worker that published a file can take it back from the folder, so each
// worker withdraws its own published checkpoints beyond the newest `keep` visible ones, parts
// first and the manifest once the parts are gone from the folder (none of them landed() any
// more: the manifest is the handle a later prune finds them by), and forgets its local mirror
// of everyone else's.
//
// Only the reassembled checkpoint (target_dir) and the local checkpoint folder being sliced are
// the worker's own local files, reached with std::filesystem. Torch- and protobuf-free header.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mirror/clock.h"
#include "mirror/mirror.h"
#include "wire/file_mac.h"

namespace gradbox::exchange {

// What every file must carry to be read by this run.
struct FileIdentity {
  std::string run_id;
  uint64_t model_fingerprint = 0;
  std::shared_ptr<const wire::FileMac> mac;  // a signed run's (Note [Signed files]); null: unsigned
};

// One manifest found in the folder.
struct FolderCheckpoint {
  uint64_t step = 0;
  uint32_t epoch = 0;  // 0: the agreed publisher; 1, 2, ...: failovers
  std::string publisher;
  uint64_t tokens = 0;
  uint64_t parameters_checksum = 0;
  std::string dir_rel;  // "checkpoints/s00000100-e0-a"
  uint64_t bytes = 0;   // total of its files
  size_t parts = 0;     // files besides the manifest
  bool own = false;     // published by this worker (read back from its published files)
};

// The file of a checkpoint folder that lists its parts; written last.
inline constexpr const char* kCheckpointManifestName = "manifest.gbx";

// "checkpoints/s<step %08d>-e<epoch>-<publisher>"
std::string folder_checkpoint_dir(uint64_t step, uint32_t epoch, const std::string& publisher);

// Publishes one checkpoint at a time through a Mirror (see the Note). Holds references to
// `mirror` and `clock`, which must outlive it.
class CheckpointPublisher {
 public:
  CheckpointPublisher(mirror::Mirror& mirror, mirror::Clock& clock, FileIdentity identity,
                      uint64_t part_bytes = 64ull << 20);
  ~CheckpointPublisher();
  CheckpointPublisher(CheckpointPublisher&&) noexcept;
  CheckpointPublisher& operator=(CheckpointPublisher&&) noexcept;

  // Slices the local checkpoint folder into parts and publishes them (parts still published by
  // an interrupted earlier publish of the same bytes are kept). Throws if a publish is in
  // progress, and InputError naming the file when the folder lacks one.
  void start(const std::filesystem::path& local_checkpoint, uint64_t step, uint32_t epoch,
             const std::string& publisher, uint64_t tokens, uint64_t parameters_checksum);
  // Publishes the manifest once every part has landed; true on the call that did. A part no
  // longer published (withdrawn meanwhile, by a prune) abandons the publish, with a warning.
  bool poll();
  bool busy() const;  // started and the manifest not published yet
  std::optional<uint64_t> pending_step() const;

 private:
  struct Pending;
  mirror::Mirror* mirror_;
  mirror::Clock* clock_;
  FileIdentity identity_;
  uint64_t part_bytes_;
  std::unique_ptr<Pending> pending_;
};

// Parsed manifests kept from one listing to the next while their bytes stay the same: a joiner
// lists the checkpoints every poll while its checkpoint's parts download.
struct ManifestCache {
  struct Entry {
    std::string bytes;
    FolderCheckpoint checkpoint;
  };
  std::map<std::string, Entry> by_rel;
};

// A manifest's bytes as the listing reads them, from the folder `dir_rel` ("checkpoints/s...-e..-..."):
// the checkpoint they describe; WireError or InputError naming `origin` for anything else.
FolderCheckpoint read_checkpoint_manifest(std::string_view bytes, const std::string& origin, const std::string& dir_rel,
                                          const FileIdentity& identity);

// Manifests the mirror shows from peers (whole and verified) plus this worker's own published
// ones, newest step first (then lowest epoch, then publisher). Unreadable or foreign manifests
// are skipped (logged once each).
// With a cache, a manifest whose bytes it holds is not parsed again.
std::vector<FolderCheckpoint> list_folder_checkpoints(mirror::Mirror& mirror, const FileIdentity& identity,
                                                      ManifestCache* cache = nullptr);

// Requests the checkpoint's parts; once all are in the mirror, verifies them and reassembles the
// files into target_dir, a local folder (a temp sibling, each file fsynced, renamed into place;
// target_dir must not exist) and returns true. False while parts are still arriving. Throws
// InputError naming the file when a part or a file does not match the manifest, so the caller
// can try an older one. Own checkpoints are reassembled from the worker's published files.
bool fetch_folder_checkpoint(mirror::Mirror& mirror, const FolderCheckpoint& checkpoint,
                             const FileIdentity& identity, const std::filesystem::path& target_dir);

// Keeps the newest `keep` (>= 1) of `visible` (list_folder_checkpoints, from this mirror and
// with nothing waited since): withdraws this worker's older published ones (parts first, the
// manifest once no part has landed any more) and forgets the local mirror (copies, requests) of
// older ones. Call it again later to finish.
void prune_folder_checkpoints(mirror::Mirror& mirror, const std::vector<FolderCheckpoint>& visible, size_t keep);

}  // namespace gradbox::exchange
