#include "data/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/checksum.h"
#include "common/error.h"
#include "data/dataset_meta.h"
#include "data/token_shards.h"

namespace gradbox::data {

namespace fs = std::filesystem;

DatasetInfo read_dataset_info(const fs::path& dir) {
  const DatasetMeta meta = read_dataset_meta(dir);
  return DatasetInfo{dir,         meta.dtype,        meta.vocab_size, meta.eot_id,
                     meta.tokenizer, meta.train_tokens, meta.val_tokens};
}

TokenFile TokenFile::open(const DatasetInfo& info, const std::string& split) {
  GB_REQUIRE(split == "train" || split == "val", "dataset split must be 'train' or 'val', not '",
             split, "'");
  // The checksums live only in meta.json; read it again rather than widen DatasetInfo.
  const DatasetMeta meta = read_dataset_meta(info.dir);
  const bool train = split == "train";
  const int64_t tokens = train ? meta.train_tokens : meta.val_tokens;
  const uint64_t expected = train ? meta.train_checksum : meta.val_checksum;

  TokenFile file;
  file.path_ = info.dir / (split + ".bin");
  file.width_ = static_cast<int>(dtype_width(parse_dtype(meta.dtype)));
  file.tokens_ = tokens;
  const std::string name = file.path_.string();

  const int fd = ::open(file.path_.c_str(), O_RDONLY | O_CLOEXEC);
  GB_REQUIRE(fd >= 0, name, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) < 0) {
    const int err = errno;
    ::close(fd);
    throw InputError(str(name, ": cannot stat: ", std::strerror(err)));
  }
  const int64_t expected_bytes = tokens * file.width_;
  if (st.st_size != expected_bytes) {
    ::close(fd);
    throw InputError(str(name, ": ", st.st_size, " bytes, but meta.json says ", tokens,
                         " tokens x ", file.width_, " bytes = ", expected_bytes,
                         ": the file is truncated or corrupt"));
  }
  file.bytes_ = static_cast<size_t>(st.st_size);
  if (file.bytes_ > 0) {
    void* p = ::mmap(nullptr, file.bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    GB_REQUIRE(p != MAP_FAILED, name, ": mmap failed: ", std::strerror(err));
    file.data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
  const uint64_t actual = checksum64(file.data_, file.bytes_);
  GB_REQUIRE(actual == expected, name, ": checksum ", to_hex64(actual), " does not match ",
             to_hex64(expected), " in meta.json: the file is corrupt");
  return file;
}

void TokenFile::read(int64_t offset, int64_t count, int64_t* out) const {
  GB_CHECK(offset >= 0 && count >= 0 && offset <= tokens_ && count <= tokens_ - offset,
           path_.string(), ": read of ", count, " tokens at ", offset, " outside ", tokens_);
  const unsigned char* p = data_ + offset * width_;
  if (width_ == 2) {
    for (int64_t i = 0; i < count; ++i, p += 2) out[i] = p[0] | (p[1] << 8);
  } else {
    for (int64_t i = 0; i < count; ++i, p += 4)
      out[i] = static_cast<int64_t>(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                                    (static_cast<uint32_t>(p[2]) << 16) |
                                    (static_cast<uint32_t>(p[3]) << 24));
  }
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      tokens_(std::exchange(other.tokens_, 0)),
      width_(other.width_) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tokens_ = std::exchange(other.tokens_, 0);
    width_ = other.width_;
  }
  return *this;
}

TokenFile::~TokenFile() { unmap(); }

void TokenFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace gradbox::data
