#pragma once
// Text <-> token ids. Two implementations behind one interface:
//  - GPT-2 byte-level BPE (encoder.json + vocab.bpe), ids identical to OpenAI's encoder.py;
//  - SentencePiece models, including byte-fallback BPEs trained here with train_bpe().
// Both round-trip bytes exactly: decode(encode(x)) == x for any input, invalid UTF-8 included
// (for SentencePiece: models trained by train_bpe(); see sentencepiece_tokenizer.h).
// Encoding is const and safe to call from several threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gradbox::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // no special tokens added
  virtual std::string decode(std::span<const int32_t> ids) const = 0;    // InputError on a bad id
  virtual int32_t vocab_size() const = 0;
  // Document separator: <|endoftext|> (50256) for GPT-2; the eos id for SentencePiece.
  virtual int32_t eot_id() const = 0;
  virtual std::string kind() const = 0;  // "gpt2-bpe" or "sentencepiece"
  // Writes the files load_tokenizer(dir) reads back; creates dir if needed.
  virtual void save(const std::filesystem::path& dir) const = 0;
  // Writes Hugging Face's names: vocab.json + merges.txt (GPT-2) or tokenizer.model (spm).
  virtual void save_hf(const std::filesystem::path& dir) const = 0;
};

// Detects the kind from the files in dir: encoder.json+vocab.bpe or vocab.json+merges.txt ->
// GPT-2 BPE; spm.model or tokenizer.model -> SentencePiece. InputError naming dir and what was
// looked for otherwise.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

std::unique_ptr<Tokenizer> load_gpt2_bpe(const std::filesystem::path& encoder_json,
                                         const std::filesystem::path& merges);

struct BpeTrainOptions {
  int32_t vocab_size = 51200;         // the source article's size
  int64_t max_sentences = 2'000'000;  // sampled lines fed to the trainer: bounds its memory
  int32_t threads = 0;                // 0: hardware concurrency
  uint32_t seed = 1;
};

// Trains a byte-fallback BPE with SentencePiece on a UTF-8 text file (one sentence or document
// per line), writes it to out_dir (spm.model) and returns it loaded. The model round-trips
// bytes exactly. InputError (with SentencePiece's message) when the corpus is too small for
// the vocab size.
std::unique_ptr<Tokenizer> train_bpe(const std::filesystem::path& corpus,
                                     const BpeTrainOptions& options,
                                     const std::filesystem::path& out_dir);

}  // namespace gradbox::tokenizer
