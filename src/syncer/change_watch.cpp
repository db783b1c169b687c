#include "syncer/change_watch.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <thread>

#include "mirror/sync_contract.h"

namespace gradbox::syncer {
namespace {

namespace fs = std::filesystem;

// What makes a pass worth running: an entry made, finished, moved in or out, or removed (a
// withdrawn outbox file). Plain writes are not: the close that ends them is.
constexpr uint32_t kChanges = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE;

bool wakes_nobody(std::string_view name) {
  return name.find(mirror::kTempMarker) != std::string_view::npos || name.ends_with(mirror::kSentSuffix);
}

}  // namespace

ChangeWatch::ChangeWatch(std::vector<fs::path> roots)
    : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)), roots_(std::move(roots)), root_watched_(roots_.size(), false) {
  watch_new_roots();
}

ChangeWatch::~ChangeWatch() {
  if (fd_ >= 0) ::close(fd_);
}

void ChangeWatch::watch_tree(const fs::path& dir) {
  if (fd_ < 0) return;
  const int wd = ::inotify_add_watch(fd_, dir.c_str(), kChanges | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK);
  if (wd < 0) return;  // gone, not a directory, or the watch limit: polling covers it
  dirs_[wd] = dir;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    if (it->symlink_status(sec).type() == fs::file_type::directory) watch_tree(it->path());
  }
}

void ChangeWatch::watch_new_roots() {
  for (size_t i = 0; i < roots_.size(); ++i) {
    if (root_watched_[i]) continue;
    std::error_code ec;
    if (!fs::is_directory(roots_[i], ec)) continue;
    watch_tree(roots_[i]);
    root_watched_[i] = true;
  }
}

bool ChangeWatch::drain() {
  if (fd_ < 0) return false;
  bool changed = false;
  alignas(inotify_event) char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = ::read(fd_, buffer, sizeof buffer);
    if (got <= 0) break;  // EAGAIN: nothing more pending
    for (ssize_t at = 0; at < got;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      if (event->mask & IN_Q_OVERFLOW) {
        // Events were lost: a pass finds what changed; new directories are found again.
        changed = true;
        for (size_t i = 0; i < roots_.size(); ++i)
          if (root_watched_[i]) watch_tree(roots_[i]);
        continue;
      }
      if (event->mask & IN_IGNORED) {  // the directory went (or was unmounted)
        dirs_.erase(event->wd);
        continue;
      }
      const std::string_view name = event->len ? std::string_view(event->name) : std::string_view();
      const auto dir = dirs_.find(event->wd);
      if ((event->mask & IN_ISDIR) && (event->mask & (IN_CREATE | IN_MOVED_TO)) && dir != dirs_.end())
        watch_tree(dir->second / std::string(name));
      if (!wakes_nobody(name)) changed = true;
    }
  }
  watch_new_roots();
  return changed;
}

bool ChangeWatch::wait(std::chrono::milliseconds timeout) {
  watch_new_roots();
  if (fd_ < 0) {
    std::this_thread::sleep_for(timeout);
    return false;
  }
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    if (drain()) return true;
    // Only temporary names moved: keep waiting out the interval.
    if (std::chrono::steady_clock::now() >= until) return false;
  }
}

}  // namespace gradbox::syncer
