#pragma once
// One process per worker directory. A notebook cell run twice starts a second `gradbox train`
// on the same --out; each then takes the other's files (its checkpoints, its syncer's state, its
// published contributions) for its own earlier life, and both die in confusing ways. The lock is
// flock(2) on <dir>/.gradbox.lock, held by an open descriptor: the kernel releases it when the
// process ends however it ends (kill -9 included), so a stale lock never blocks a restart. The
// file names its holder (pid, host, start time) for the refusal's message.
#include <filesystem>
#include <string>

namespace gradbox {

class DirectoryLock {
 public:
  // Takes the lock of `dir` (made if missing) for `purpose` (e.g. "--out"); throws InputError
  // naming the flag, the folder and the process that holds it when another one does. Where the
  // file system has no flock (some network mounts), it holds nothing and says so in `warning()`.
  DirectoryLock(const std::filesystem::path& dir, const std::string& purpose);
  // Releases the lock. A folder this lock made that holds nothing but the lock file when it is
  // released (the session stopped on bad input before writing) is removed: bad input leaves
  // nothing behind.
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& warning() const { return warning_; }

 private:
  int fd_ = -1;
  std::filesystem::path dir_;
  bool made_dir_ = false;
  std::string warning_;
};

}  // namespace gradbox
