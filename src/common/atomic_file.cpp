#include "common/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/disk_space.h"
#include "common/error.h"

namespace gradbox {
namespace {

std::string errno_text() { return std::strerror(errno); }

fs::path unique_temp_path(const fs::path& final_path) {
  static std::atomic<uint64_t> counter{0};
  return fs::path(str(final_path.string(), ".tmp.", ::getpid(), ".", counter++));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path final_path)
    : final_path_(std::move(final_path)), temp_path_(unique_temp_path(final_path_)) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_write_error(temp_path_, "cannot create", errno);
}

AtomicFileWriter::AtomicFileWriter(fs::path final_path, const std::optional<fs::path>& reuse)
    : final_path_(std::move(final_path)), temp_path_(unique_temp_path(final_path_)) {
  if (reuse && ::rename(reuse->c_str(), temp_path_.c_str()) == 0) {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CLOEXEC);
    reused_ = fd_ >= 0;
    if (fd_ < 0) ::unlink(temp_path_.c_str());
  }
  if (fd_ < 0) fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_write_error(temp_path_, "cannot create", errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) {
    std::error_code ignored;
    fs::remove(temp_path_, ignored);
  }
}

void AtomicFileWriter::write(const void* data, size_t size) {
  const std::string_view piece(static_cast<const char*>(data), size);
  write(std::span<const std::string_view>(&piece, 1));
}

void AtomicFileWriter::write(std::span<const std::string_view> pieces) {
  GB_CHECK(fd_ >= 0, "write after commit to ", final_path_);
  std::vector<iovec> left;
  for (std::string_view piece : pieces)
    if (!piece.empty()) left.push_back({const_cast<char*>(piece.data()), piece.size()});
  size_t first = 0;
  while (first < left.size()) {
    const int count = static_cast<int>(std::min<size_t>(left.size() - first, IOV_MAX));
    ssize_t n = ::writev(fd_, left.data() + first, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_write_error(temp_path_, "write failed", errno);
    written_ += static_cast<uint64_t>(n);
    // Past what was written: whole pieces, then into the one it stopped in.
    for (size_t done = static_cast<size_t>(n); done > 0;) {
      iovec& piece = left[first];
      const size_t step = std::min(done, piece.iov_len);
      piece.iov_base = static_cast<char*>(piece.iov_base) + step;
      piece.iov_len -= step;
      done -= step;
      if (piece.iov_len == 0) ++first;
    }
    while (first < left.size() && left[first].iov_len == 0) ++first;
  }
}

void AtomicFileWriter::commit(Durability durability) {
  GB_CHECK(fd_ >= 0, "double commit of ", final_path_);
  const bool durable = durability == Durability::durable;
  int rc = 0;
  // A reused file may be longer than what was written over it.
  if (reused_)
    do rc = ::ftruncate(fd_, static_cast<off_t>(written_)); while (rc < 0 && errno == EINTR);
  if (rc < 0) throw_write_error(temp_path_, "cannot cut to its size", errno);
  if (durable)
    do rc = ::fsync(fd_); while (rc < 0 && errno == EINTR);
  if (rc < 0) throw_write_error(temp_path_, "fsync failed", errno);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), final_path_.c_str()) < 0)
    throw_write_error(final_path_, "rename failed", errno);
  committed_ = true;
  if (durable) fsync_dir(final_path_.has_parent_path() ? final_path_.parent_path() : fs::path("."));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

void replace_file(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit(AtomicFileWriter::Durability::not_durable);
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw InputError(str(dir.string(), ": cannot open directory: ", errno_text()));
  int rc;
  do rc = ::fsync(fd); while (rc < 0 && errno == EINTR);
  ::close(fd);
  if (rc < 0) throw_write_error(dir, "fsync failed", errno);
}

// One allocation of the size the file has when opened and one read(2) per 64 MB: exchange
// files are 100s of MB, and a stream iterator's char-by-char growth cost more than the bytes.
// A file that grows meanwhile is read to its end all the same.
void read_file_into(const fs::path& path, std::string& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(str(path.string(), ": cannot open: ", errno_text()));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(str(path.string(), ": cannot stat: ", errno_text()));
  if (S_ISDIR(st.st_mode)) throw InputError(str(path.string(), ": is a directory, not a file"));
  bytes.resize(static_cast<size_t>(std::max<off_t>(st.st_size, 0)) + 1);  // + 1: sees the end
  size_t have = 0;
  while (true) {
    if (have == bytes.size()) bytes.resize(bytes.size() * 2);
    const size_t want = std::min<size_t>(bytes.size() - have, size_t{64} << 20);
    const ssize_t got = ::read(fd, bytes.data() + have, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(str(path.string(), ": read failed: ", errno_text()));
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  bytes.resize(have);
}

std::string read_file(const fs::path& path) {
  std::string bytes;
  read_file_into(path, bytes);
  return bytes;
}

fs::path copy_dir_atomic(const fs::path& from, const fs::path& to) {
  const fs::path partial = to.string() + ".tmp.copy";
  fs::remove_all(partial);
  fs::remove_all(to);
  fs::create_directories(to.parent_path());
  fs::copy(from, partial, fs::copy_options::recursive);
  fs::rename(partial, to);
  return to;
}

}  // namespace gradbox
