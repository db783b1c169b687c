#pragma once
// Note [A full disk]
// A full disk is the one write failure that retrying in place cannot fix, and on a free
// session it is common (a 100 GB disk, checkpoints of 10 GB, a mirror of every peer's files).
// Every local write in gradbox reports it as DiskFullError naming the path and the space left,
// never as "write failed" or an internal error:
//  - the worker stops at once: a checkpoint is written under a temporary name and renamed when
//    whole (worker/checkpoint.cpp), so the last one stays intact and the temporary one is
//    removed; restarted after space is freed, the worker resumes from it;
//  - its syncer exits with kSyncerExitLocalDiskFull (mirror/sync_contract.h), since on a full
//    disk it may not even be able to write its log; the worker turns that status into the same
//    message, naming its local folder;
//  - a shared folder that is full (a Drive out of storage) is not this worker's disk: the
//    syncer warns once and keeps retrying the uploads.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace gradbox {

// ENOSPC or EDQUOT.
bool is_disk_full(int err);
// A DiskFullError, or a std::filesystem / std::system_error with one of those codes. On true,
// `path` (when given) gets the path the write was refused on (empty when the error has none).
bool is_disk_full(const std::exception& e, std::string* path = nullptr);

// Bytes free for an unprivileged writer on the file system that holds `path` (or its nearest
// existing ancestor); nullopt when it cannot be asked.
std::optional<uint64_t> free_bytes(const std::filesystem::path& path);

// "1.5 GB", "730 kB", "0 bytes": for messages.
std::string bytes_text(uint64_t bytes);

// "<path>: cannot write: the disk is full (No space left on device; 0 bytes free there)".
std::string disk_full_message(const std::filesystem::path& path, int err);

// Throws DiskFullError when `err` says the disk is full, else InputError("<path>: <what>: <strerror>").
[[noreturn]] void throw_write_error(const std::filesystem::path& path, std::string_view what, int err);

}  // namespace gradbox
