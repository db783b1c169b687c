#pragma once
// SentencePiece models (spm.model, or Hugging Face's tokenizer.model) via libsentencepiece.
//
// Byte-exact round trips need a model that keeps text as it is (identity normalization, no
// dummy prefix, no whitespace removal) and has the 256 byte pieces; train_bpe() makes such
// models, and the constructor recognises them by a probe round trip. For those, encode() also
// escapes what SentencePiece would alter on its own (invalid UTF-8 becomes U+FFFD; U+2581 "▁"
// is its stand-in for a space and would come back as " ") as byte pieces, and decode() maps
// pieces to bytes itself, since SentencePiece's decode also replaces invalid UTF-8.
// Other models (Llama's adds a dummy prefix) go through SentencePiece both ways unchanged.
//
// SentencePiece's BPE encoder runs at ~2 MB/s; byte-exact models encode text in segments
// (see Note [SentencePiece segments]) through a per-word cache instead.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/word_cache.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gradbox::tokenizer {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // model_bytes: a serialized SentencePiece ModelProto; origin names it in errors.
  SentencePieceTokenizer(std::string model_bytes, const std::filesystem::path& origin);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eot_id() const override { return eot_id_; }
  std::string kind() const override { return "sentencepiece"; }
  void save(const std::filesystem::path& dir) const override;     // spm.model
  void save_hf(const std::filesystem::path& dir) const override;  // tokenizer.model

  // Whether decode(encode(x)) == x for every byte string x (see the note at the top).
  bool byte_exact() const { return byte_exact_; }
  // Whether encode() cuts text into cached segments (Note [SentencePiece segments]).
  bool segmented() const { return segments_; }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, WordCache& cache, std::vector<int32_t>& out) const;
  std::string decode_exact(std::span<const int32_t> ids) const;
  void write_model(const std::filesystem::path& dir, const char* name) const;

  std::string model_bytes_;  // kept to save the model byte for byte
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int32_t vocab_size_ = 0;
  int32_t eot_id_ = -1;
  std::array<int32_t, 256> byte_id_{};  // id of the piece <0xXX>, -1 if the model lacks it
  std::vector<std::string> surface_;    // the bytes each id decodes to (byte-exact models)
  bool byte_exact_ = false;
  bool segments_ = false;  // Note [SentencePiece segments] holds for this model
  WordCachePool caches_;
};

std::unique_ptr<Tokenizer> load_sentencepiece(const std::filesystem::path& model_file);

}  // namespace gradbox::tokenizer
