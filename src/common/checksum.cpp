#include "common/checksum.h"

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "common/error.h"

namespace gradbox {

uint64_t checksum64(const void* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t file_checksum64(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str(path.string(), ": cannot open for checksum"));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_64bits_update(state.get(), buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw InputError(str(path.string(), ": read failed during checksum"));
  return XXH3_64bits_digest(state.get());
}

std::string to_hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace gradbox
