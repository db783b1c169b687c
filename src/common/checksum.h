#pragma once
// XXH3-64 checksums for files and buffers: fast enough to verify every byte we read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace gradbox {

uint64_t checksum64(const void* data, size_t size);

// checksum64 of bytes given in pieces: update() each in order, then digest().
class Checksum64Stream {
 public:
  Checksum64Stream();
  ~Checksum64Stream();
  Checksum64Stream(const Checksum64Stream&) = delete;
  Checksum64Stream& operator=(const Checksum64Stream&) = delete;
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  void* state_;  // an XXH3_state_t, kept out of this header
};
// Streams the file; throws InputError naming it when it cannot be read.
uint64_t file_checksum64(const std::filesystem::path& path);
std::string to_hex64(uint64_t value);  // 16 lowercase hex digits

}  // namespace gradbox
