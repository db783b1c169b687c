#include "common/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "common/error.h"

namespace gradbox {

uint64_t checksum64(const void* data, size_t size) { return XXH3_64bits(data, size); }

Checksum64Stream::Checksum64Stream() : state_(XXH3_createState()) {
  GB_CHECK(state_ != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Checksum64Stream::~Checksum64Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Checksum64Stream::update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Checksum64Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

uint64_t file_checksum64(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str(path.string(), ": cannot open for checksum"));
  Checksum64Stream sum;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    sum.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw InputError(str(path.string(), ": read failed during checksum"));
  return sum.digest();
}

std::string to_hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace gradbox
