#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "common/atomic_file.h"
#include "common/error.h"

namespace gradbox::tokenizer {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's " "
constexpr size_t kCacheEntries = 1 << 18;                  // per cache (one per concurrent encode)
constexpr size_t kMaxCachedSegmentBytes = 128;

// Leading and repeated spaces, tab, newline, a ligature and a full-width letter: any
// normalization, dummy prefix or whitespace removal changes it.
constexpr std::string_view kProbe = "  a  b \t\n\xEF\xAC\x81 \xEF\xBC\xA1 c  ";

// Length of the valid UTF-8 character at text[i], or 0 if the bytes there are not one
// (truncated, overlong, surrogate, above U+10FFFF): SentencePiece would turn them into U+FFFD.
size_t utf8_char_len(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const auto cont = [&](size_t k) { return i + k < text.size() && (byte(k) & 0xC0) == 0x80; };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;  // continuation byte, or overlong 2-byte lead
  if (c < 0xE0) return cont(1) ? 2 : 0;
  if (c < 0xF0) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && byte(1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c < 0xF5) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

// A piece's text: SentencePiece writes a space as U+2581.
std::string piece_surface(std::string_view piece) {
  std::string text;
  text.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpaceSymbol.size()) == kSpaceSymbol) {
      text += ' ';
      i += kSpaceSymbol.size();
    } else {
      text += piece[i++];
    }
  }
  return text;
}

// Whether some piece has a space after something else ("a▁b"), i.e. could span the start of a
// run of spaces.
bool has_inner_space(std::string_view piece) {
  for (size_t pos = piece.find(kSpaceSymbol); pos != std::string_view::npos;
       pos = piece.find(kSpaceSymbol, pos + kSpaceSymbol.size())) {
    if (pos > 0 && (pos < kSpaceSymbol.size() ||
                    piece.substr(pos - kSpaceSymbol.size(), kSpaceSymbol.size()) != kSpaceSymbol))
      return true;
  }
  return false;
}

}  // namespace

// Note [SentencePiece segments]
// SentencePiece's BPE repeatedly merges the adjacent pair whose concatenation is the
// best-scoring piece. No merge can join two symbols whose concatenation is not a piece, so if
// no piece contains "x▁" (x not a space), and models trained with split_by_whitespace have
// none, no merge crosses the start of a run of spaces, and every merge inside a segment
// happens as if the segment were alone. So text cut before each run of spaces ("Hello",
// " world", "   again") encodes to the concatenation of its segments' ids, and frequent
// segments come from a cache. Checked per model at load; tests compare with whole-text
// SentencePiece.
SentencePieceTokenizer::SentencePieceTokenizer(std::string model_bytes, const fs::path& origin)
    : model_bytes_(std::move(model_bytes)),
      sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()),
      caches_(kCacheEntries) {
  const auto status = sp_->LoadFromSerializedProto(model_bytes_);
  GB_REQUIRE(status.ok(), origin.string(),
             ": not a valid SentencePiece model: ", status.ToString());
  vocab_size_ = sp_->GetPieceSize();
  GB_REQUIRE(vocab_size_ > 0, origin.string(), ": SentencePiece model has no pieces");
  eot_id_ = sp_->eos_id();
  GB_REQUIRE(eot_id_ >= 0, origin.string(),
             ": SentencePiece model has no eos piece, which gradbox uses as document separator");

  byte_id_.fill(-1);
  surface_.resize(vocab_size_);
  bool all_bytes = true;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const std::string& piece = sp_->IdToPiece(id);
    if (sp_->IsByte(id)) {  // "<0xAB>"
      const int value = std::stoi(piece.substr(3, 2), nullptr, 16);
      byte_id_[value] = id;
      surface_[id] = std::string(1, static_cast<char>(value));
    } else if (sp_->IsControl(id)) {
      surface_[id].clear();
    } else if (sp_->IsUnknown(id)) {
      surface_[id] = sp_->DecodeIds({id});
    } else {
      surface_[id] = piece_surface(piece);
    }
  }
  for (int32_t id : byte_id_) all_bytes = all_bytes && id >= 0;
  if (all_bytes) {
    std::vector<int32_t> ids;
    encode_plain(kProbe, ids);
    byte_exact_ = decode_exact(ids) == kProbe;
  }
  segments_ = byte_exact_;
  for (int32_t id = 0; id < vocab_size_ && segments_; ++id)
    segments_ = sp_->IsByte(id) || sp_->IsControl(id) || !has_inner_space(sp_->IdToPiece(id));
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

void SentencePieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  const auto status = sp_->Encode({text.data(), text.size()}, &ids);  // its string_view: std's, or its own before 0.1.97
  GB_CHECK(status.ok(), "SentencePiece encode failed: ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

void SentencePieceTokenizer::encode_segment(std::string_view segment, WordCache& cache,
                                            std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  if (segment.size() > kMaxCachedSegmentBytes) {
    encode_plain(segment, out);
    return;
  }
  const uint64_t hash = WordCache::hash(segment);
  if (cache.lookup(segment, hash, out)) return;
  const size_t start = out.size();
  encode_plain(segment, out);
  cache.insert(segment, hash, std::span<const int32_t>(out).subspan(start));
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (!byte_exact_) {
    encode_plain(text, out);
    return out;
  }
  out.reserve(text.size() / 3 + 1);
  const WordCachePool::Lease lease = caches_.borrow();
  WordCache& cache = *lease;
  auto flush = [&](size_t begin, size_t end) {
    const std::string_view plain = text.substr(begin, end - begin);
    if (segments_)
      encode_segment(plain, cache, out);
    else
      encode_plain(plain, out);
  };
  // Text between escapes goes to SentencePiece, cut into segments before each run of spaces;
  // each escaped byte becomes its byte piece.
  size_t begin = 0;
  for (size_t i = 0; i < text.size();) {
    if (segments_ && text[i] == ' ' && i > begin && text[i - 1] != ' ') {
      flush(begin, i);
      begin = i;
    }
    const size_t len = utf8_char_len(text, i);
    const bool escape = len == 0 || text.substr(i, len) == kSpaceSymbol;
    if (!escape) {
      i += len;
      continue;
    }
    flush(begin, i);
    for (size_t end = i + std::max<size_t>(len, 1); i < end; ++i)
      out.push_back(byte_id_[static_cast<unsigned char>(text[i])]);
    begin = i;
  }
  flush(begin, text.size());
  return out;
}

std::string SentencePieceTokenizer::decode_exact(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) text += surface_[id];
  return text;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    GB_REQUIRE(ids[i] >= 0 && ids[i] < vocab_size_, "decode: token id ", ids[i], " at position ", i,
               " is outside the SentencePiece vocabulary [0, ", vocab_size_, ")");
  if (byte_exact_) return decode_exact(ids);
  return sp_->DecodeIds(std::vector<int>(ids.begin(), ids.end()));
}

void SentencePieceTokenizer::write_model(const fs::path& dir, const char* name) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  GB_REQUIRE(!ec, dir.string(), ": cannot create directory: ", ec.message());
  write_file_atomic(dir / name, model_bytes_);
}

void SentencePieceTokenizer::save(const fs::path& dir) const { write_model(dir, "spm.model"); }

void SentencePieceTokenizer::save_hf(const fs::path& dir) const {
  write_model(dir, "tokenizer.model");
}

std::unique_ptr<Tokenizer> load_sentencepiece(const fs::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(read_file(model_file), model_file);
}

}  // namespace gradbox::tokenizer
