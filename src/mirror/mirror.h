#pragma once
// Note [The seam]
// The folder protocol touches the shared folder only through a Mirror and time only through a
// Clock (clock.h), as leveldb's code touches files only through its Env. Real runs use
// DiskMirror (the worker's local disk, kept in step with the shared folder by gradbox-sync:
// Note [The syncer contract] in sync_contract.h) and the system clock. Tests and the simulator
// use MemoryMirror over a simulated cloud folder (memory_mirror.h) and a virtual clock, so that
// failover, staleness, partitions and repair play out deterministically in virtual time, with
// the protocol's real code.
//
// Paths ("rel") are relative to the shared folder's root, '/'-separated. A Mirror shows the
// shared folder as the syncer has verified it: list() and read() see only whole, flagged files
// of peers; this worker's own files are reached through the *published* calls.
// Torch- and protobuf-free.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gradbox::mirror {

// A peer's file as this worker's mirror holds it.
struct Arrival {
  std::string name;         // the file's name within the listed folder
  int64_t arrived_unix_ms;  // when it was flagged, on this worker's own clock (not the writer's)
};

class Mirror {
 public:
  virtual ~Mirror() = default;

  // --- this worker's own files ---
  // Publishes bytes under rel, once: the syncer uploads them and never overwrites anything.
  virtual void publish(const std::string& rel, std::string_view bytes) = 0;
  // The same for a file held in pieces (a framed file's head, payload and trailer), without
  // joining them first where the mirror can.
  virtual void publish_pieces(const std::string& rel, std::span<const std::string_view> pieces) {
    std::string joined;
    for (std::string_view piece : pieces) joined += piece;
    publish(rel, joined);
  }
  // rel is in the outbox (published in this life or an earlier one, and not withdrawn).
  virtual bool published(const std::string& rel) = 0;
  virtual std::optional<std::string> read_published(const std::string& rel) = 0;
  // Names of own files directly in dir (no markers, no temp files).
  virtual std::vector<std::string> list_published(const std::string& dir) = 0;
  // The syncer has uploaded rel: it is in the shared folder for everyone.
  virtual bool landed(const std::string& rel) = 0;
  // Takes back a published file, or every file under a folder: the syncer deletes the shared
  // copies. Peers' files are not touched.
  virtual void withdraw(const std::string& rel) = 0;

  // --- peers' files ---
  // Whole, verified peer files directly in dir.
  virtual std::vector<Arrival> list(const std::string& dir) = 0;
  // Sub-folders of dir, in the mirror of the folder or among own files.
  virtual std::vector<std::string> list_dirs(const std::string& dir) = 0;
  // A whole, verified peer file; nullopt when there is none (yet, or no longer).
  virtual std::optional<std::string> read(const std::string& rel) = 0;
  // read() and read_published() into the caller's buffer (contents replaced, capacity reused:
  // the exchange reads a 50 MB shard every round); false when there is no file.
  virtual bool read_into(const std::string& rel, std::string& out) { return take(read(rel), out); }
  virtual bool read_published_into(const std::string& rel, std::string& out) { return take(read_published(rel), out); }
  // Files the syncer fetches only on demand (sync_contract.h) are fetched from now on: rel
  // names one file, or a prefix of the names of files in its folder ("rounds/r00000012/g-a-s0-"
  // asks for every contribution of a to shard 0, whatever its unpredictable token).
  virtual void request(const std::string& rel) = 0;
  // Drops the local mirror of a peer file, or of everything under a folder (copies, flags,
  // requests). Own files are not touched.
  virtual void forget(const std::string& rel) = 0;

  // --- the syncer ---
  // The run's control file (the one shared file edited in place), as last mirrored.
  virtual std::optional<std::string> control() = 0;
  // Whole listings of the shared folder the syncer has completed. It stops advancing while the
  // folder cannot be seen (an unmounted Drive, a network outage).
  virtual uint64_t settled_passes() = 0;
  // Where a person finds rel, for messages ("/content/run/w1/sync/inbox/rounds/r00000012/...").
  virtual std::string where(const std::string& rel) const = 0;

 private:
  static bool take(std::optional<std::string>&& bytes, std::string& out) {
    if (!bytes) return false;
    out = std::move(*bytes);
    return true;
  }
};

}  // namespace gradbox::mirror
