#include "common/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "common/error.h"

namespace gradbox {

bool is_disk_full(int err) { return err == ENOSPC || err == EDQUOT; }

bool is_disk_full(const std::exception& e, std::string* path) {
  if (const auto* full = dynamic_cast<const DiskFullError*>(&e)) {
    if (path) *path = full->path();
    return true;
  }
  if (const auto* fs_error = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    if (!is_disk_full(fs_error->code().value())) return false;
    if (path) *path = fs_error->path1().string();
    return true;
  }
  if (const auto* sys_error = dynamic_cast<const std::system_error*>(&e)) {
    if (sys_error->code().category() != std::generic_category() &&
        sys_error->code().category() != std::system_category())
      return false;
    if (!is_disk_full(sys_error->code().value())) return false;
    if (path) path->clear();
    return true;
  }
  return false;
}

std::optional<uint64_t> free_bytes(const std::filesystem::path& path) {
  std::filesystem::path probe = path;
  std::error_code ec;
  while (!probe.empty() && !std::filesystem::exists(probe, ec)) {
    if (probe == probe.parent_path()) break;
    probe = probe.parent_path();
  }
  if (probe.empty()) probe = ".";
  struct ::statvfs vfs {};
  if (::statvfs(probe.c_str(), &vfs) != 0) return std::nullopt;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

std::string bytes_text(uint64_t bytes) {
  if (bytes < 1000) return str(bytes, bytes == 1 ? " byte" : " bytes");
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB"};
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1000 && unit < 4) value /= 1000, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, value < 10 ? "%.1f %s" : "%.0f %s", value, kUnits[unit]);
  return text;
}

std::string disk_full_message(const std::filesystem::path& path, int err) {
  const std::optional<uint64_t> free = free_bytes(path.parent_path());
  return str(path.string(), ": cannot write: the disk is full (", std::strerror(err),
             free ? str("; ", bytes_text(*free), " free there") : std::string(), ")");
}

void throw_write_error(const std::filesystem::path& path, std::string_view what, int err) {
  if (is_disk_full(err)) throw DiskFullError(path.string(), disk_full_message(path, err));
  throw InputError(str(path.string(), ": ", what, ": ", std::strerror(err)));
}

}  // namespace gradbox
