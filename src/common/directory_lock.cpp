#include "common/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/error.h"

namespace gradbox {

namespace {

std::string holder_text() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = "";
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return str("pid ", ::getpid(), " on ", host, ", since ", when, "\n");
}

std::string read_holder(int fd) {
  char buffer[512];
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string text(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text.empty() ? "a process that has not yet written its name" : text;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::filesystem::path& dir, const std::string& purpose)
    : dir_(dir), made_dir_(!std::filesystem::exists(dir)) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / ".gradbox.lock";
  // O_CLOEXEC: a child (the syncer) must not hold the lock on after this process dies.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw SystemFault(str(purpose, " ", dir.string(), ": cannot open ", path.string(), ": ", std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      const std::string holder = read_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      throw InputError(str(purpose, " ", dir.string(), ": another gradbox is using this folder (", holder,
                           "); one folder serves one session: stop that one, or give this one its own ", purpose));
    }
    warning_ = str(purpose, " ", dir.string(), ": cannot lock ", path.string(), " (", std::strerror(err),
                   "); nothing stops a second session from using this folder at the same time");
    return;
  }
  const std::string holder = holder_text();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) < 0)
    warning_ = str(purpose, " ", dir.string(), ": cannot write the lock holder's name to ", path.string());
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  if (made_dir_) {
    int entries = 0;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end && entries < 2; it.increment(ec))
      ++entries;
    if (!ec && entries == 1) {  // the lock file itself
      std::filesystem::remove(dir_ / ".gradbox.lock", ec);
      std::filesystem::remove(dir_, ec);
    }
  }
  ::close(fd_);  // releases the flock
}

}  // namespace gradbox
