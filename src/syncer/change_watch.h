#pragma once
// Note [Waking on changes]
// A syncer that only polls pays for every look at the folders whether anything changed or not,
// and a file waits up to a poll interval at each hop (outbox to shared folder, shared folder to
// a peer's inbox: two hops a contribution, two more for a sharded round's reduced shard). At the
// 5 ms poll that hides those waits, three syncers' listings cost a 124M round on a local folder
// about as much CPU as its fp16 decodes (scripts/bench/exchange_bench.sh); at gradbox-sync's
// 500 ms default each hop waits 250 ms on average.
//
// Where a folder lives in this machine's kernel (the worker's outbox and requests always, the
// shared folder when it is a local or shared disk), inotify says when an entry is made, written
// and closed, moved or removed, and the syncer passes at once. The poll interval stays the
// floor of how often it looks anyway, so an event only ever brings a pass forward and nothing
// waits on one: a cloud mount (FUSE) raises no event for a peer's file, the cloud-folder
// simulator's lag ends with no event at all, the event queue can overflow, and a watch can be
// refused (the per-user limit).
//
// inotify watches a directory, not a tree: each directory under a root is watched when it
// appears (a directory's creation event, then a walk of it for what was made before its watch
// was), and a root that does not exist yet is looked for again at each wait. Names of temporary
// files (".tmp": Note [The syncer contract]) and the syncer's own ".sent" markers wake nobody:
// the rename that ends an atomic write does. Linux only; elsewhere nothing is watched.
#include <chrono>
#include <filesystem>
#include <unordered_map>
#include <vector>

namespace gradbox::syncer {

class ChangeWatch {
 public:
  // Watches the trees under `roots` (those missing now are watched once they exist).
  explicit ChangeWatch(std::vector<std::filesystem::path> roots);
  ~ChangeWatch();
  ChangeWatch(const ChangeWatch&) = delete;
  ChangeWatch& operator=(const ChangeWatch&) = delete;

  // The descriptor that becomes readable when something changed (for an event loop); -1 when
  // the kernel watches nothing for us (no inotify): then only the poll interval wakes a syncer.
  int fd() const { return fd_; }
  // Blocks until something changed under a root or `timeout` passed; true on a change. The
  // pending events are consumed.
  bool wait(std::chrono::milliseconds timeout);
  // Consumes the pending events without blocking (once fd() is readable); true if one of them
  // was a change worth a pass.
  bool drain();
  // Starts watching the roots made since (wait() and drain() do this too; an event loop that
  // sees no event calls it on its polls).
  void watch_new_roots();
  // Directories watched now (for tests and logs).
  size_t watched() const { return dirs_.size(); }

 private:
  void watch_tree(const std::filesystem::path& dir);

  int fd_ = -1;
  std::vector<std::filesystem::path> roots_;
  std::vector<bool> root_watched_;
  std::unordered_map<int, std::filesystem::path> dirs_;  // watch descriptor -> directory
};

}  // namespace gradbox::syncer
