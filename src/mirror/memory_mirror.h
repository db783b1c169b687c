#pragma once
// Note [The simulated folder]
// A cloud shared folder and every worker's local disk, in memory, on a Simulation's virtual
// clock (virtual_clock.h), with seeded faults: what DiskMirror + gradbox-sync + Drive do
// (disk_mirror.h, Note [The syncer contract]), but deterministic and fast enough for tens of
// workers and thousands of files.
//   - publish -> the shared folder after upload_s (write-once: the first bytes to land keep a
//     name; different bytes later are a conflict, never uploaded; equal bytes count as landed);
//   - each landed (or injected) file reaches every other disk's inbox after a log-normal lag
//     per (viewer, file) counted from its landing, so arrivals come out of order; a disk
//     created later, or requesting an on-demand file ("part-...") later, sees it once that
//     lag has passed (a checkpoint that landed an hour ago is there at once, not a fresh lag
//     later); never a rel the disk itself ever published;
//   - faults: a first partial copy (unflagged for another lag), lost listings (unseen for
//     another lag), outages (no uploads, deletions, arrivals or settled passes meanwhile);
//   - links, when given a bandwidth: each disk uploads one file at a time and downloads one at
//     a time, each charged its nominal size (FolderFaults::nominal_bytes); checkpoint parts go
//     up one at a time when nothing else waits, as the syncer sends them (Note [Upload order]
//     in syncer/syncer.h).
// Like the real syncer, a disk's syncer never re-fetches a rel it once flagged (forget() does
// not bring it back) and lives as long as the disk: a restarted worker gets the same
// MemoryMirror. State moves lazily: every call first plays the folder's events, in (time,
// sequence) order, up to the simulation's now, so results do not depend on how often anyone
// looks. Every random draw comes from one std::mt19937_64 in that order. Not thread-safe: it
// relies on the Simulation running one process at a time. Kill the processes using it (Simulation::kill_all) before
// it is destroyed. Torch-free.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "mirror/mirror.h"
#include "mirror/virtual_clock.h"

namespace gradbox::mirror {

struct FolderFaults {
  double lag_median_s = 0.05, lag_p90_s = 0.2;  // visibility lag per (viewer, file), log-normal
  double upload_s = 0.01;                       // publish -> landed (and withdraw -> deleted)
  double pass_s = 0.05;                         // syncer listing period: settled_passes ticks
  double lost_listing = 0;  // probability a due file stays unseen for another lag
  double partial = 0;       // probability a viewer first gets a partial copy (unflagged a lag more)
  std::vector<std::string> on_demand_prefixes = {"part-", "p-", "g-"};  // as gradbox train starts its syncer
  // Each disk's link (0: instant). Uploads go one at a time (the syncer's order), taking
  // upload_s + size / upload_bytes_per_s; a file visible to a disk then downloads one at a time
  // at download_bytes_per_s before it is flagged there. Neither draws a random number.
  double upload_bytes_per_s = 0, download_bytes_per_s = 0;
  // The size a file's transfer is charged for (empty: its bytes). The speed-up simulator runs
  // a small model's files through the protocol and charges a large model's sizes.
  std::function<uint64_t(const std::string& rel, uint64_t bytes)> nominal_bytes;
};

struct FolderCounters {
  uint64_t landed = 0;
  uint64_t conflicts = 0;  // upload (or injection) refused: name taken by other bytes
  uint64_t partial_copies = 0;
  uint64_t lost_listings = 0;
  uint64_t deliveries = 0;  // files flagged in some inbox
};

class SimFolder;

// One worker disk's view of the simulated folder (SimFolder::disk).
class MemoryMirror final : public Mirror {
 public:
  void publish(const std::string& rel, std::string_view bytes) override;
  bool published(const std::string& rel) override;
  std::optional<std::string> read_published(const std::string& rel) override;
  std::vector<std::string> list_published(const std::string& dir) override;
  bool landed(const std::string& rel) override;  // false again once withdrawn
  void withdraw(const std::string& rel) override;

  std::vector<Arrival> list(const std::string& dir) override;
  std::vector<std::string> list_dirs(const std::string& dir) override;
  std::optional<std::string> read(const std::string& rel) override;
  void request(const std::string& rel) override;
  void forget(const std::string& rel) override;

  std::optional<std::string> control() override;
  uint64_t settled_passes() override;
  std::string where(const std::string& rel) const override;  // "mem://<disk>/<rel>"

  const std::string& name() const { return name_; }
  // What this disk put into the shared folder, at nominal sizes (FolderFaults::nominal_bytes),
  // by top-level folder ("rounds", "checkpoints", ...).
  const std::map<std::string, uint64_t>& uploaded_bytes() const { return uploaded_bytes_; }

 private:
  friend class SimFolder;
  struct OutFile {
    std::string bytes;
    uint64_t generation = 0;  // tells a withdrawn-then-republished file from its old upload
    bool landed = false;
    uint64_t shared_id = 0;  // the shared copy it landed as (withdraw deletes only that one)
  };
  struct InFile {
    std::string bytes;
    int64_t arrived_unix_ms = 0;
  };
  template <class File>
  using Tree = std::map<std::string, std::map<std::string, File>>;  // dir -> name -> file

  MemoryMirror(SimFolder& folder, std::string name, int index, double created_s);
  OutFile* find_published(const std::string& rel);
  void count_dirs(const std::string& rel, int delta);  // keeps children_ for list_dirs
  void add_arrival(const std::string& rel, InFile file);
  // Pure part of the settled_passes computation (non-outage time since creation).
  double live_seconds(double now_s) const;
  bool requested(const std::string& rel) const;  // by its name or a prefix of it

  SimFolder& folder_;
  const std::string name_;
  const int index_;
  const double created_s_;
  Tree<OutFile> outbox_;
  Tree<InFile> inbox_;
  std::map<std::string, std::map<std::string, int>> children_;  // dir -> sub-folder -> files under it
  std::set<std::string> requests_;
  std::unordered_set<std::string> own_;                  // ever published here
  std::unordered_set<std::string> done_;                 // flagged here once: never fetched again
  std::unordered_map<std::string, uint64_t> scheduled_;  // rel -> shared id on its way here
  std::vector<std::pair<double, double>> outages_;       // [from, to), sorted and disjoint
  std::optional<std::string> control_;
  uint64_t control_version_ = 0;
  double upload_free_s_ = 0;    // when its link finishes the uploads queued so far
  std::deque<std::pair<std::string, uint64_t>> waiting_parts_;  // checkpoint parts: rel, generation
  bool part_tick_pending_ = false;  // a Kind::next_part event is queued for this disk
  double download_free_s_ = 0;  // likewise for downloads
  std::map<std::string, uint64_t> uploaded_bytes_;
};

class SimFolder {
 public:
  SimFolder(Simulation& sim, uint64_t seed, FolderFaults faults = {});
  ~SimFolder();
  SimFolder(const SimFolder&) = delete;
  SimFolder& operator=(const SimFolder&) = delete;

  // Created on first use (its syncer then fetches what the folder already holds), then the
  // same object for as long as the folder lives.
  MemoryMirror& disk(const std::string& disk_name);
  // From max(from_s, now) to to_s the disk cannot reach the folder: its uploads and deletions
  // wait until the end (+ upload_s), arrivals due meanwhile come a fresh lag after the end,
  // and settled_passes stands still.
  void outage(const std::string& disk_name, double from_s, double to_s);
  // A stranger (a person, another tool) writes a file straight into the shared folder now;
  // write-once applies, so it can squat a name.
  void inject(const std::string& rel, std::string bytes);
  // The control file changes now; each disk's control() sees it after a lag.
  void set_control(std::string text);

  const FolderCounters& counters() const;
  // What the shared folder holds under rel now (for invariant checks).
  std::optional<std::string> shared_file(const std::string& rel) const;
  const FolderFaults& faults() const { return faults_; }

 private:
  friend class MemoryMirror;
  enum class Kind { upload, remove, deliver, control, next_part };
  struct Event {
    double t;
    uint64_t seq;
    Kind kind;
    int disk;
    std::string rel;  // the control text for Kind::control
    uint64_t id;      // upload: generation; remove, deliver: shared id; control: version
    int attempt;      // deliver: earlier tries (only the first may be partial)
    bool downloaded = false;  // deliver: over the disk's link already (download_bytes_per_s)
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  struct SharedFile {
    std::string bytes;
    uint64_t id;
    int owner;  // disk index; -1 when injected
    double landed_s = 0;
  };

  // Plays every event due by the simulation's now. Const so that const views are current:
  // the state it moves is the lazily computed present, hence mutable.
  void advance() const;
  void fire(const Event& e) const;
  void push(double t, Kind kind, int disk, std::string rel, uint64_t id, int attempt = 0, bool downloaded = false) const;
  // Seconds the file's transfer takes at this rate (0 when the rate is 0: instant).
  double transfer_s(const std::string& rel, uint64_t bytes, double bytes_per_s) const;
  uint64_t nominal(const std::string& rel, uint64_t bytes) const;
  void fire_upload(const Event& e) const;
  void fire_next_part(const Event& e) const;  // starts a disk's next checkpoint part when its link is free
  void fire_deliver(const Event& e) const;
  void arrive(MemoryMirror& d, const Event& e, const SharedFile& file) const;  // flagged in d's inbox
  void deliver_everywhere(const std::string& rel, uint64_t id, int owner, double t) const;
  // rel (landed at landed_s) reaches d a lag after it landed, and not before not_before_s (when
  // d first looked for it: its creation, a request).
  void schedule_delivery(MemoryMirror& d, const std::string& rel, uint64_t id, double landed_s, double not_before_s) const;
  bool on_demand(const std::string& rel) const;
  bool in_outage(const MemoryMirror& d, double t) const;
  double outage_end(const MemoryMirror& d, double t) const;
  double lag() const;
  double uniform() const;  // [0, 1)

  Simulation& sim_;
  const FolderFaults faults_;
  std::vector<std::unique_ptr<MemoryMirror>> disks_;  // creation order: the order of draws
  std::unordered_map<std::string, int> disk_index_;
  std::string control_text_;
  uint64_t control_version_ = 0;
  mutable std::mt19937_64 rng_;
  mutable std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  mutable uint64_t seq_ = 0;
  mutable uint64_t next_id_ = 0;
  mutable std::map<std::string, SharedFile> shared_;  // ordered: a new disk fetches in name order
  mutable FolderCounters counters_;
};

}  // namespace gradbox::mirror
