#pragma once
// `gradbox prepare`: raw text in, a tokenized dataset folder out.
//
//   inputs -> readers (document_reader.h) -> cleaning (text_cleaner.h) -> tokenizer
//          -> train.bin / val.bin (token_shards.h) -> tokenizer/, report.json, meta.json
//
// With --tokenizer gpt2 that is one pass. With --tokenizer bpe the first pass cleans into a
// scratch spool of exact documents plus a one-document-per-line corpus of the same kept
// documents for the BPE trainer (newlines inside a document become spaces there: the trainer
// reads lines, and only the statistics matter to it); the BPE is trained on that corpus, and the second pass tokenizes
// the spool, so cleaning runs once and the token files hold the documents' real newlines.
// Scratch space is about twice the cleaned text, in DIR/.prepare.tmp.<pid>/.
// The output folder follows Note [prepared folder protocol] (output_folder.h).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/cleaning_report.h"
#include "data/document_reader.h"
#include "data/output_folder.h"
#include "data/text_cleaner.h"
#include "data/token_shards.h"

namespace gradbox::data {

enum class TokenizerChoice : uint8_t { gpt2, bpe };
TokenizerChoice parse_tokenizer_choice(std::string_view name);  // InputError naming --tokenizer
std::string_view tokenizer_choice_name(TokenizerChoice choice);

// The one place the defaults of `gradbox prepare` live; the CLI flags map onto these fields.
struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, "-" for stdin
  std::filesystem::path out;
  DocumentFormat format = DocumentFormat::detect;
  int64_t max_doc_bytes = 1 << 20;  // bytes held per document while reading

  CleaningOptions cleaning;
  std::optional<std::filesystem::path> stopwords_file;  // replaces the built-in lists

  TokenizerChoice tokenizer = TokenizerChoice::bpe;
  std::filesystem::path gpt2_dir;    // encoder.json + vocab.bpe, for TokenizerChoice::gpt2 (empty: gpt2_files())
  int32_t vocab_size = 51200;        // for TokenizerChoice::bpe
  int64_t bpe_max_sentences = 2'000'000;

  double val_fraction = 0.005;
  uint32_t seed = 1;
  int32_t threads = 0;  // tokenizer threads; 0: hardware concurrency
  Overwrite overwrite = Overwrite::refuse;
};

struct PrepareReport {
  CleaningReport cleaning;
  SplitStats split;
  int64_t input_files = 0;
  int32_t vocab_size = 0;
  std::string tokenizer;
  int64_t simhash_fingerprints = 0;
  int64_t simhash_evicted = 0;
  double seconds = 0;
};

// Throws InputError naming the flag or file for bad options or inputs; see prepare.h's top note
// for what is left behind on failure (nothing that looks like a dataset).
PrepareReport prepare_dataset(const PrepareOptions& options);

// The options after defaults, as one JSON line (logged, and saved in report.json).
std::string options_json(const PrepareOptions& options);

// Where --tokenizer gpt2 reads encoder.json and vocab.bpe: --gpt2-dir, else the shipped ones.
std::filesystem::path gpt2_files(const PrepareOptions& options);

}  // namespace gradbox::data
