#pragma once
// Writing train.bin / val.bin in nanoGPT's layout: token ids as raw little-endian uint16 when
// the vocabulary fits (vocab_size <= 65536), else uint32; no header. Every document is followed
// by the tokenizer's end-of-text id.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/atomic_file.h"

namespace gradbox::data {

enum class TokenDtype : uint8_t { uint16, uint32 };
TokenDtype dtype_for_vocab(int32_t vocab_size);
std::string_view dtype_name(TokenDtype dtype);
TokenDtype parse_dtype(std::string_view name);  // GB_CHECK on an unknown name
int64_t dtype_width(TokenDtype dtype);          // bytes per token

// Appends tokens to one .bin file through an AtomicFileWriter: nothing appears under the final
// name before commit(). Keeps an XXH3 checksum of the bytes written, equal to
// gradbox::file_checksum64 of the committed file.
class TokenShardWriter {
 public:
  TokenShardWriter(std::filesystem::path path, TokenDtype dtype, int32_t vocab_size);
  ~TokenShardWriter();

  // GB_CHECK: every id in [0, vocab_size).
  void append(std::span<const int32_t> tokens);
  void commit();

  int64_t tokens() const { return tokens_; }
  uint64_t checksum() const;  // only after commit()

 private:
  void flush();

  AtomicFileWriter file_;
  TokenDtype dtype_;
  int32_t vocab_size_;
  std::vector<unsigned char> buffer_;
  std::shared_ptr<void> hash_state_;  // XXH3_state_t, kept out of the header
  int64_t tokens_ = 0;
  uint64_t checksum_ = 0;
  bool committed_ = false;
};

enum class Split : uint8_t { train, val };

// Deterministic per document: a hash of the text and the seed, compared with val_fraction.
Split assign_split(std::string_view text, double val_fraction, uint64_t seed);

struct SplitStats {
  int64_t train_docs = 0;
  int64_t val_docs = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  uint64_t train_checksum = 0;
  uint64_t val_checksum = 0;
};

// Writes documents into DIR/train.bin and DIR/val.bin by assign_split(). So that neither split
// is empty when there are at least two documents, the latest document is held back: at
// finish(), it goes to whichever split is still empty (otherwise to its own split).
class SplitShardWriter {
 public:
  SplitShardWriter(const std::filesystem::path& dir, int32_t vocab_size, int32_t eot_id,
                   double val_fraction, uint64_t seed);

  // tokens of one document, without the end-of-text id (appended here).
  void add(std::string_view text, std::vector<int32_t> tokens);
  // Writes the held-back document, commits both files and returns their statistics.
  SplitStats finish();

 private:
  void write(Split split, std::vector<int32_t>& tokens);

  TokenShardWriter train_;
  TokenShardWriter val_;
  int32_t eot_id_;
  double val_fraction_;
  uint64_t seed_;
  SplitStats stats_;
  bool has_pending_ = false;
  Split pending_split_ = Split::train;
  std::vector<int32_t> pending_;
};

}  // namespace gradbox::data
