#pragma once
// XXH3-64 checksums for files and buffers: fast enough to verify every byte we read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace gradbox {

uint64_t checksum64(const void* data, size_t size);
// Streams the file; throws InputError naming it when it cannot be read.
uint64_t file_checksum64(const std::filesystem::path& path);
std::string to_hex64(uint64_t value);  // 16 lowercase hex digits

}  // namespace gradbox
