#pragma once
// GPT-2 byte-level BPE, ids identical to OpenAI's encoder.py (and Hugging Face's GPT2Tokenizer):
// same pre-tokenizer regex, same byte alphabet, same merge order. Differences, on purpose:
//  - "<|endoftext|>" inside the text is ordinary text, as in encoder.py; eot_id() is its id.
//  - Input need not be valid UTF-8: runs of invalid bytes become words of their own, and
//    decode() returns the exact bytes (encoder.py decodes with errors="replace").
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/merge_table.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/word_cache.h"

namespace gradbox::tokenizer {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // encoder_json_text/merges_text: the contents of encoder.json and vocab.bpe; the paths only
  // name them in errors. Throws InputError on a malformed file.
  Gpt2BpeTokenizer(std::string encoder_json_text, std::string merges_text,
                   const std::filesystem::path& encoder_json_path,
                   const std::filesystem::path& merges_path);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_bytes_.size()); }
  int32_t eot_id() const override { return eot_id_; }
  std::string kind() const override { return "gpt2-bpe"; }
  void save(const std::filesystem::path& dir) const override;     // encoder.json + vocab.bpe
  void save_hf(const std::filesystem::path& dir) const override;  // vocab.json + merges.txt

  // BPE of one pre-tokenized word, without the cache (exposed for tests and benchmarks).
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void parse_encoder(const std::filesystem::path& path);
  void parse_merges(const std::filesystem::path& path);
  void write_files(const std::filesystem::path& dir, const char* vocab_name,
                   const char* merges_name) const;

  std::string encoder_json_text_;  // kept to save the files byte for byte
  std::string merges_text_;
  std::vector<std::string> id_to_bytes_;  // raw bytes of each token
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  std::array<int32_t, 256> byte_id_{};  // the token of each single byte
  MergeTable merges_;
  int32_t eot_id_ = -1;
  Gpt2Pretokenizer pretokenizer_;
  WordCachePool caches_;
};

}  // namespace gradbox::tokenizer
