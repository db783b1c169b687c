#include "data/doc_spool.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace gradbox::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kStdioBuffer = 1 << 20;
}  // namespace

SpoolWriter::SpoolWriter(fs::path path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "wb");
  GB_REQUIRE(file_ != nullptr, path_.string(), ": cannot create: ", std::strerror(errno));
  std::setvbuf(file_, nullptr, _IOFBF, kStdioBuffer);
}

SpoolWriter::~SpoolWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void SpoolWriter::write(std::string_view doc) {
  GB_CHECK(file_ != nullptr && doc.size() < (uint64_t{1} << 32), "spool write ", doc.size());
  const auto n = static_cast<uint32_t>(doc.size());
  const unsigned char length[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                   static_cast<unsigned char>(n >> 16),
                                   static_cast<unsigned char>(n >> 24)};
  if (std::fwrite(length, 1, 4, file_) != 4 || std::fwrite(doc.data(), 1, n, file_) != n)
    throw InputError(str(path_.string(), ": write failed: ", std::strerror(errno)));
}

void SpoolWriter::close() {
  GB_CHECK(file_ != nullptr, "spool closed twice");
  const bool ok = std::fflush(file_) == 0 && !std::ferror(file_);
  const int err = errno;
  std::fclose(file_);
  file_ = nullptr;
  GB_REQUIRE(ok, path_.string(), ": write failed: ", std::strerror(err));
}

SpoolReader::SpoolReader(fs::path path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "rb");
  GB_REQUIRE(file_ != nullptr, path_.string(), ": cannot open: ", std::strerror(errno));
  std::setvbuf(file_, nullptr, _IOFBF, kStdioBuffer);
}

SpoolReader::~SpoolReader() {
  if (file_ != nullptr) std::fclose(file_);
}

bool SpoolReader::next(std::string& doc) {
  unsigned char length[4];
  const size_t got = std::fread(length, 1, 4, file_);
  if (got == 0 && std::feof(file_)) return false;
  GB_REQUIRE(got == 4, path_.string(), ": truncated record");
  const uint32_t n = length[0] | (length[1] << 8) | (length[2] << 16) |
                     (static_cast<uint32_t>(length[3]) << 24);
  doc.resize(n);
  GB_REQUIRE(std::fread(doc.data(), 1, n, file_) == n, path_.string(), ": truncated record");
  return true;
}

}  // namespace gradbox::data
