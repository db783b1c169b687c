#pragma once
// Reading a prepared dataset (the folder `gradbox prepare` writes): meta.json plus train.bin and
// val.bin, memory-mapped read-only. The trainer codes against this header.
#include <cstdint>
#include <filesystem>
#include <string>

namespace gradbox::data {

struct DatasetInfo {
  std::filesystem::path dir;
  std::string dtype;  // "uint16" | "uint32"
  int32_t vocab_size;
  int32_t eot_id;
  std::string tokenizer;  // Tokenizer::kind(); the tokenizer itself is in DIR/tokenizer/
  int64_t train_tokens;
  int64_t val_tokens;
};

// Reads and validates DIR/meta.json (unknown format/version, missing keys -> InputError naming
// the file and key).
DatasetInfo read_dataset_info(const std::filesystem::path& dir);

// A read-only mmap of train.bin or val.bin.
class TokenFile {
 public:
  // Checks size == tokens * width and the XXH3 checksum from meta.json (this reads the whole
  // file once); InputError naming the file on a mismatch (truncated or corrupt).
  static TokenFile open(const DatasetInfo& info, const std::string& split /* "train" | "val" */);

  int64_t size() const { return tokens_; }  // tokens
  // Tokens [offset, offset + count) widened to int64; GB_CHECK on bounds.
  void read(int64_t offset, int64_t count, int64_t* out) const;
  const std::filesystem::path& path() const { return path_; }

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();  // unmaps

 private:
  TokenFile() = default;
  void unmap();

  std::filesystem::path path_;
  const unsigned char* data_ = nullptr;  // nullptr for an empty file
  size_t bytes_ = 0;
  int64_t tokens_ = 0;
  int width_ = 2;
};

}  // namespace gradbox::data
