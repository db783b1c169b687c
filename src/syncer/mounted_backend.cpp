#include "syncer/mounted_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/disk_space.h"
#include "common/error.h"

namespace gradbox::syncer {
namespace {

// RAII file descriptor; system calls retried on EINTR, errno in the message.
class Fd {
 public:
  Fd(const fs::path& path, int flags, mode_t mode = 0644) : path_(path) {
    do fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    while (fd_ < 0 && errno == EINTR);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  bool ok() const { return fd_ >= 0; }
  int get() const { return fd_; }
  const fs::path& path() const { return path_; }
  [[noreturn]] void fail(const char* what) const {
    const int err = errno;
    if (is_disk_full(err)) throw DiskFullError(path_.string(), disk_full_message(path_, err));  // Note [A full disk]
    throw BackendError(str(what, " ", path_.string(), ": ", std::strerror(err)));
  }
  size_t read_some(char* buf, size_t n) {
    for (;;) {
      ssize_t r = ::read(fd_, buf, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno != EINTR) fail("cannot read");
    }
  }
  void write_all(const char* buf, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, buf, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("cannot write");
      }
      buf += w;
      n -= static_cast<size_t>(w);
    }
  }
  void sync() {
    if (::fsync(fd_) != 0) fail("cannot fsync");
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

// In the kernel first (copy_file_range: no copy through user space, and a shared extent where
// the file system can), then read/write for what it refuses: another file system (EXDEV), an
// O_APPEND target (EBADF), a FUSE mount without support. Both advance the same file offsets.
uint64_t copy_fd(Fd& in, Fd& out, uint64_t limit) {
  uint64_t total = 0;
  while (total < limit) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(uint64_t{64} << 20, limit - total));
    const ssize_t got = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, want, 0);
    if (got > 0) {
      total += static_cast<uint64_t>(got);
      continue;
    }
    if (got == 0) return total;  // the end of the file
    if (errno == EINTR) continue;
    if (is_disk_full(errno)) out.fail("cannot write");
    if (errno != EXDEV && errno != EBADF && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
      throw BackendError(str("cannot copy ", in.path().string(), " to ", out.path().string(), ": ", std::strerror(errno)));
    }
    break;
  }
  std::vector<char> buf(1 << 20);
  while (total < limit) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), limit - total));
    size_t got = in.read_some(buf.data(), want);
    if (got == 0) break;
    out.write_all(buf.data(), got);
    total += got;
  }
  return total;
}

// Note [Hard-linked transfers]
// Where the shared folder and the local folder are one file system (a local cluster, a
// multi-GPU machine, a shared disk mounted where the worker's folder is), a transfer is a hard
// link: the file's bytes are neither copied nor written again (the copies were most of what the
// syncers cost a round: scripts/bench/exchange_bench.sh). The rules stay those of copies:
//   - upload: link() never replaces a name (EEXIST, as O_EXCL), and the whole file appears at
//     once (a copy shows a growing prefix first);
//   - download: only a regular file is linked, and what is read later is verified again where
//     it is read (the syncer verifies the link before flagging it; the worker's wire::parse
//     checks every byte it reads), so an edit made in place afterwards, which a link would share
//     with the inbox, is caught as corruption, never used.
// Another file system (EXDEV), a mount that refuses links (EPERM, ENOTSUP: FUSE, FAT, cloud
// mounts), a link count at its limit (EMLINK): the bytes are copied as before. The cloud-folder
// simulator always copies: a link keeps the writer's mtime, and its lag counts from the landing. Any other
// failure (a name taken, a folder gone) is left to that copy, which reports it as it always has.
bool linked(const fs::path& from, const fs::path& to) {
  int rc;
  do rc = ::link(from.c_str(), to.c_str());
  while (rc != 0 && errno == EINTR);
  return rc == 0;
}

// Every file gradbox writes into the shared folder ends in .gbx or .json; a directory so named
// stands where a file belongs.
bool looks_like_a_file(const std::string& rel) { return rel.ends_with(".gbx") || rel.ends_with(".json"); }

bool is_regular_file_here(const fs::path& path) {
  struct ::stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

uint64_t copy_file_bytes(const fs::path& from, const fs::path& to, uint64_t limit) {
  Fd in(from, O_RDONLY | O_NOFOLLOW);  // a link planted in the shared folder is never followed
  if (!in.ok()) in.fail("cannot open");
  Fd out(to, O_WRONLY | O_CREAT | O_TRUNC);
  if (!out.ok()) out.fail("cannot create");
  uint64_t n = copy_fd(in, out, limit);
  out.sync();
  return n;
}

MountedBackend::MountedBackend(fs::path root, Transfers transfers) : root_(std::move(root)), transfers_(transfers) {}

void MountedBackend::require_root() const {
  std::error_code ec;
  if (fs::is_directory(root_, ec)) return;
  throw SharedFolderGone(str("the shared folder ", root_.string(), " is gone or unmounted (",
                             ec ? ec.message() : std::string("not a directory"), "); it is never recreated here"));
}

void MountedBackend::make_dirs(const std::string& rel_dir) const {
  fs::path dir = root_;
  for (const auto& part : fs::path(rel_dir)) {
    dir /= part;
    int rc;
    do rc = ::mkdir(dir.c_str(), 0755);
    while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EEXIST) {
      const int err = errno;
      require_root();
      throw BackendError(str("cannot create ", dir.string(), ": ", std::strerror(err)));
    }
  }
}

std::vector<RemoteEntry> MountedBackend::list() {
  require_root();
  std::vector<RemoteEntry> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    require_root();
    throw BackendError(str("cannot list ", root_.string(), ": ", ec.message()));
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;  // a directory vanished under us: the next poll lists again
    std::error_code fec;
    const fs::file_status status = it->symlink_status(fec);  // links are entries, never followed
    if (fec) continue;  // deleted between listing and stat
    const std::string rel = it->path().lexically_relative(root_).generic_string();
    if (fs::is_regular_file(status)) {
      const uint64_t size = it->file_size(fec);
      if (!fec) out.push_back({rel, size, RemoteEntry::Kind::file});
    } else if (fs::is_symlink(status)) {
      out.push_back({rel, 0, RemoteEntry::Kind::link});
    } else if (fs::is_directory(status)) {
      if (!looks_like_a_file(rel)) continue;  // a folder of the layout: listed inside
      out.push_back({rel, 0, RemoteEntry::Kind::directory});
      it.disable_recursion_pending();
    } else {
      out.push_back({rel, 0, RemoteEntry::Kind::other});
    }
  }
  // The root itself gone mid-listing: what was seen is not a listing of the shared folder.
  if (ec) require_root();
  return out;
}

std::optional<uint64_t> MountedBackend::stat(const std::string& rel) {
  check_rel(rel);
  struct ::stat st {};
  if (::lstat((root_ / rel).c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      require_root();  // absent from a missing folder is not "absent"
      return std::nullopt;
    }
    throw BackendError(str("cannot stat ", (root_ / rel).string(), ": ", std::strerror(err)));
  }
  return static_cast<uint64_t>(st.st_size);
}

std::optional<RemoteHead> MountedBackend::head(const std::string& rel, size_t max_bytes) {
  check_rel(rel);
  Fd in(root_ / rel, O_RDONLY | O_NOFOLLOW);
  if (!in.ok()) {
    require_root();
    in.fail("cannot open");
  }
  struct ::stat st {};
  if (::fstat(in.get(), &st) != 0) in.fail("cannot stat");
  RemoteHead head;
  head.size = static_cast<uint64_t>(st.st_size);
  head.bytes.resize(static_cast<size_t>(std::min<uint64_t>(max_bytes, head.size)));
  size_t got = 0;
  while (got < head.bytes.size()) {
    const size_t n = in.read_some(head.bytes.data() + got, head.bytes.size() - got);
    if (n == 0) break;  // shrunk since fstat: what was read is the head
    got += n;
  }
  head.bytes.resize(got);
  return head;
}

void MountedBackend::download(const std::string& rel, const fs::path& local_path) {
  check_rel(rel);
  const fs::path from = root_ / rel;
  // A link needs the name free; the caller's temporary name is its own.
  std::error_code ec;
  fs::remove(local_path, ec);
  if (transfers_ == Transfers::link_where_possible && is_regular_file_here(from) && linked(from, local_path))
    return;  // Note [Hard-linked transfers]
  download_copy(rel, local_path);
}

void MountedBackend::download_copy(const std::string& rel, const fs::path& local_path) {
  check_rel(rel);
  try {
    copy_file_bytes(root_ / rel, local_path);
  } catch (const BackendError&) {
    require_root();
    throw;
  }
}

void MountedBackend::upload(const fs::path& local_path, const std::string& rel, UploadMode mode) {
  check_rel(rel);
  require_root();
  const fs::path dest = root_ / rel;
  make_dirs(parent_rel(rel));
  if (transfers_ == Transfers::link_where_possible && mode == UploadMode::create_new && linked(local_path, dest))
    return;  // Note [Hard-linked transfers]
  Fd in(local_path, O_RDONLY);
  if (!in.ok()) in.fail("cannot open");
  if (mode == UploadMode::create_new) {
    Fd out(dest, O_WRONLY | O_CREAT | O_EXCL);  // write-once: never overwrite
    if (!out.ok()) {
      const int err = errno;
      if (err == ENOENT) require_root();  // the root vanished since the check above
      errno = err;
      out.fail("cannot create");
    }
    copy_fd(in, out, UINT64_MAX);
    out.sync();
    return;
  }
  // Finish our own interrupted upload: append the missing tail, never truncate (a reader sees a
  // growing prefix, i.e. `incomplete`, never different bytes).
  Fd out(dest, O_WRONLY | O_APPEND);
  if (!out.ok()) {
    const int err = errno;
    if (err == ENOENT) require_root();  // the root vanished since the check above
    errno = err;
    out.fail("cannot open");
  }
  struct ::stat st {};
  if (::fstat(out.get(), &st) != 0) out.fail("cannot stat");
  if (::lseek(in.get(), st.st_size, SEEK_SET) < 0) in.fail("cannot seek");
  copy_fd(in, out, UINT64_MAX);
  out.sync();
}

void MountedBackend::remove(const std::string& rel) {
  check_rel(rel);
  std::error_code ec;
  const bool removed = fs::remove(root_ / rel, ec);  // false, no error: it was not there
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw BackendError(str("cannot delete ", (root_ / rel).string(), ": ", ec.message()));
  if (!removed) require_root();  // already gone, unless the whole folder is: then it is not deleted yet
}

void MountedBackend::remove_empty_dirs(const std::string& rel_dir) {
  for (std::string dir = rel_dir; !dir.empty(); dir = parent_rel(dir)) {
    std::error_code ec;
    if (!fs::is_directory(root_ / dir, ec) || !fs::is_empty(root_ / dir, ec)) return;
    if (!fs::remove(root_ / dir, ec) || ec) return;
  }
}

}  // namespace gradbox::syncer
