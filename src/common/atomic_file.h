#pragma once
// Local durable writes, in leveldb's order: temp file -> fsync -> rename -> fsync(dir).
// A reader never sees a half-written file under the final name, and a crash leaves at most a
// stray "*.tmp.*" file, which is never mistaken for the real one.
// (The shared cloud folder has different rules: write once under a unique name, never rename.)
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gradbox {

namespace fs = std::filesystem;

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(fs::path final_path);
  // Writes over the file `reuse` (renamed to the temp name first) instead of a new one, and
  // cuts it to what was written at commit: its pages are overwritten, not allocated afresh
  // (Note [Recycled files] in mirror/disk_mirror.cpp). A new file when `reuse` is gone.
  AtomicFileWriter(fs::path final_path, const std::optional<fs::path>& reuse);
  ~AtomicFileWriter();  // removes the temp file unless commit() succeeded
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // The pieces one after another, in as few system calls as writev(2) allows.
  void write(std::span<const std::string_view> pieces);
  bool reused() const { return reused_; }
  uint64_t bytes_written() const { return written_; }
  // fsync, close, rename over the final path, fsync the directory. Not durable: close and
  // rename only (still atomic for readers; a crash may leave the previous version).
  enum class Durability { durable, not_durable };
  void commit(Durability durability = Durability::durable);

 private:
  fs::path final_path_;
  fs::path temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
  bool reused_ = false;
};

void write_file_atomic(const fs::path& path, std::string_view bytes);
// Atomic for readers, not durable: for files rewritten every step that a crash may lose
// (stats), where two fsyncs a step cost a slow disk more than the file is worth.
void replace_file(const fs::path& path, std::string_view bytes);
void fsync_dir(const fs::path& dir);
// Copies the folder `from` to `to` (replacing it) under a temporary name, then renames it: a
// reader sees the whole copy or none.
fs::path copy_dir_atomic(const fs::path& from, const fs::path& to);
// Reads a whole file; throws InputError naming the file when it cannot.
std::string read_file(const fs::path& path);
// The same into out (its contents replaced): a buffer kept from an earlier read of a file as
// large is reused, without a fresh allocation's page faults.
void read_file_into(const fs::path& path, std::string& out);

}  // namespace gradbox
