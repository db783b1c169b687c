#include "data/token_shards.h"

#include <xxhash.h>

#include "common/error.h"

namespace gradbox::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kBufferBytes = 1 << 20;
}  // namespace

TokenDtype dtype_for_vocab(int32_t vocab_size) {
  GB_CHECK(vocab_size > 0, "vocab_size ", vocab_size);
  return vocab_size <= 65536 ? TokenDtype::uint16 : TokenDtype::uint32;
}

std::string_view dtype_name(TokenDtype dtype) {
  return dtype == TokenDtype::uint16 ? "uint16" : "uint32";
}

TokenDtype parse_dtype(std::string_view name) {
  if (name == "uint16") return TokenDtype::uint16;
  GB_CHECK(name == "uint32", "unknown dtype '", name, "'");
  return TokenDtype::uint32;
}

int64_t dtype_width(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? 2 : 4; }

TokenShardWriter::TokenShardWriter(fs::path path, TokenDtype dtype, int32_t vocab_size)
    : file_(std::move(path)),
      dtype_(dtype),
      vocab_size_(vocab_size),
      hash_state_(XXH3_createState(), [](void* s) { XXH3_freeState(static_cast<XXH3_state_t*>(s)); }) {
  GB_CHECK(hash_state_ != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(hash_state_.get()));
  buffer_.reserve(kBufferBytes);
}

TokenShardWriter::~TokenShardWriter() = default;

void TokenShardWriter::append(std::span<const int32_t> tokens) {
  GB_CHECK(!committed_, "append after commit");
  const int64_t width = dtype_width(dtype_);
  for (const int32_t id : tokens) {
    GB_CHECK(id >= 0 && id < vocab_size_, "token id ", id, " outside vocabulary of ", vocab_size_);
    const auto v = static_cast<uint32_t>(id);
    // Little-endian by construction, whatever the host.
    buffer_.push_back(static_cast<unsigned char>(v));
    buffer_.push_back(static_cast<unsigned char>(v >> 8));
    if (width == 4) {
      buffer_.push_back(static_cast<unsigned char>(v >> 16));
      buffer_.push_back(static_cast<unsigned char>(v >> 24));
    }
    if (buffer_.size() >= kBufferBytes) flush();
  }
  tokens_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::flush() {
  if (buffer_.empty()) return;
  XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_state_.get()), buffer_.data(), buffer_.size());
  file_.write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void TokenShardWriter::commit() {
  flush();
  file_.commit();
  checksum_ = XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_state_.get()));
  committed_ = true;
}

uint64_t TokenShardWriter::checksum() const {
  GB_CHECK(committed_, "checksum before commit");
  return checksum_;
}

Split assign_split(std::string_view text, double val_fraction, uint64_t seed) {
  const uint64_t h = XXH3_64bits_withSeed(text.data(), text.size(), seed);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u < val_fraction ? Split::val : Split::train;
}

SplitShardWriter::SplitShardWriter(const fs::path& dir, int32_t vocab_size, int32_t eot_id,
                                   double val_fraction, uint64_t seed)
    : train_(dir / "train.bin", dtype_for_vocab(vocab_size), vocab_size),
      val_(dir / "val.bin", dtype_for_vocab(vocab_size), vocab_size),
      eot_id_(eot_id),
      val_fraction_(val_fraction),
      seed_(seed) {
  GB_CHECK(eot_id >= 0 && eot_id < vocab_size, "eot_id ", eot_id, " vocab_size ", vocab_size);
}

void SplitShardWriter::add(std::string_view text, std::vector<int32_t> tokens) {
  if (has_pending_) write(pending_split_, pending_);
  pending_ = std::move(tokens);
  pending_split_ = assign_split(text, val_fraction_, seed_);
  has_pending_ = true;
}

void SplitShardWriter::write(Split split, std::vector<int32_t>& tokens) {
  tokens.push_back(eot_id_);
  const auto n = static_cast<int64_t>(tokens.size());
  if (split == Split::train) {
    train_.append(tokens);
    stats_.train_docs += 1;
    stats_.train_tokens += n;
  } else {
    val_.append(tokens);
    stats_.val_docs += 1;
    stats_.val_tokens += n;
  }
  tokens.clear();
}

SplitStats SplitShardWriter::finish() {
  if (has_pending_) {
    Split split = pending_split_;
    if (stats_.val_docs == 0 && stats_.train_docs > 0) split = Split::val;
    else if (stats_.train_docs == 0 && stats_.val_docs > 0) split = Split::train;
    write(split, pending_);
    has_pending_ = false;
  }
  train_.commit();
  val_.commit();
  stats_.train_checksum = train_.checksum();
  stats_.val_checksum = val_.checksum();
  return stats_;
}

}  // namespace gradbox::data
