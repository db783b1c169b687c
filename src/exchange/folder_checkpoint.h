#pragma once
// Training checkpoints shared through the folder, as seen through the syncer's local mirror.
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
// Manifest last: the publisher writes every part into LOCAL/outbox at once, and the manifest
// only once the syncer has uploaded each of them (its .sent marker exists). The caller polls
// that state machine once per round, so training never waits for an upload. A manifest in the
// folder therefore means its parts are there too (unless they are being pruned).
//
// Readers: manifests are small and every syncer downloads them; parts are fetched on demand
// (names starting with "part-": only once LOCAL/requests/<rel> exists). A checkpoint is
// complete only when its manifest verifies and belongs to this run, every part it lists is
// flagged in the inbox and pinned by its payload checksum, and the reassembled files have the
// manifest's sizes and checksums. A newer checkpoint still uploading (or broken) never hides an
// older complete one: the caller walks list_folder_checkpoints() newest first.
//
// Pruning: the syncer deletes from the folder only what the worker itself published, so each
// worker drops its own published checkpoints beyond the newest `keep` visible ones from its
// outbox, parts first and the manifest once the parts are gone from the folder (the manifest is
// the handle a later prune finds them by), and drops its local mirror of everyone else's.
//
// Torch- and protobuf-free header.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradbox::exchange {

// What every file must carry to be read by this run.
struct FileIdentity {
  std::string run_id;
  uint64_t model_fingerprint = 0;
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
  bool own = false;     // published by this worker (read from its outbox)
};

// "checkpoints/s<step %08d>-e<epoch>-<publisher>"
std::string folder_checkpoint_dir(uint64_t step, uint32_t epoch, const std::string& publisher);

// Publishes one checkpoint at a time into LOCAL/outbox (see the Note).
class CheckpointPublisher {
 public:
  CheckpointPublisher(std::filesystem::path local_dir, FileIdentity identity, uint64_t part_bytes = 64ull << 20);
  ~CheckpointPublisher();
  CheckpointPublisher(CheckpointPublisher&&) noexcept;
  CheckpointPublisher& operator=(CheckpointPublisher&&) noexcept;

  // Slices the local checkpoint folder into parts in the outbox (parts left by an interrupted
  // earlier publish of the same bytes are kept). Throws if a publish is in progress, and
  // InputError naming the file when the folder lacks one.
  void start(const std::filesystem::path& local_checkpoint, uint64_t step, uint32_t epoch,
             const std::string& publisher, uint64_t tokens, uint64_t parameters_checksum);
  // Writes the manifest once every part is uploaded (.sent); true on the call that did. A part
  // gone from the outbox (pruned meanwhile) abandons the publish, with a warning.
  bool poll();
  bool busy() const;  // started and the manifest not written yet
  std::optional<uint64_t> pending_step() const;

 private:
  struct Pending;
  std::filesystem::path local_dir_;
  FileIdentity identity_;
  uint64_t part_bytes_;
  std::unique_ptr<Pending> pending_;
};

// Manifests visible in LOCAL/inbox (flagged) plus this worker's own in LOCAL/outbox, newest step
// first (then lowest epoch, then publisher). Unreadable or foreign manifests are skipped (logged
// once each).
std::vector<FolderCheckpoint> list_folder_checkpoints(const std::filesystem::path& local_dir,
                                                      const FileIdentity& identity);

// Requests the checkpoint's parts; once all are flagged, verifies them and reassembles the files
// into target_dir (a temp sibling, each file fsynced, renamed into place; target_dir must not
// exist) and returns true. False while parts are still arriving. Throws InputError naming the
// file when a part or a file does not match the manifest, so the caller can try an older one.
// Own checkpoints are reassembled from the outbox.
bool fetch_folder_checkpoint(const std::filesystem::path& local_dir, const FolderCheckpoint& checkpoint,
                             const FileIdentity& identity, const std::filesystem::path& target_dir);

// Keeps the newest `keep` (>= 1) visible checkpoints: drops this worker's older published ones
// from its outbox (parts first, the manifest once the syncer deleted them) and the local mirror
// (inbox files, flags, requests) of older ones. Call it again later to finish.
void prune_folder_checkpoints(const std::filesystem::path& local_dir, const FileIdentity& identity, size_t keep);

}  // namespace gradbox::exchange
