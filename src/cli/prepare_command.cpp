// gradbox prepare: raw text -> cleaned, tokenized dataset folder (train.bin, val.bin,
// tokenizer/, report.json, meta.json). Flags map onto data::PrepareOptions, whose field
// initialisers are the defaults. No LibTorch in this file.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "data/prepare.h"

namespace gradbox::cli {
namespace {

// Flags that are parsed from text after CLI11 is done (enums, optional paths).
struct PrepareText {
  std::string format = "auto";
  std::string tokenizer = "bpe";
  std::string script = "any";
  std::string stopwords;
  std::string gpt2_dir;
  std::string out;
  bool force = false;
};

}  // namespace

void add_prepare_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "prepare",
      "Clean raw text (length, stop words, letter and special-character ratios, script, "
      "SimHash near-duplicates), tokenize it and write a dataset folder for `gradbox train`");
  auto o = std::make_shared<data::PrepareOptions>();
  auto t = std::make_shared<PrepareText>();
  data::QualityOptions& q = o->cleaning.quality;

  cmd->add_option("--input", o->inputs,
                  "Input files or folders (recursive, sorted); '-' reads standard input")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--out", t->out, "Output dataset folder")->required();
  cmd->add_option("--format", t->format,
                  "auto, lines (one document per line), paragraphs (blank-line separated), "
                  "fortune ('%' lines), jsonl (field \"text\")")
      ->capture_default_str();
  cmd->add_option("--max-doc-bytes", o->max_doc_bytes,
                  "Bytes held per document while reading; longer ones count as too_long")
      ->capture_default_str();

  cmd->add_option("--min-chars", q.min_chars, "Drop documents shorter than this (code points)")
      ->capture_default_str();
  cmd->add_option("--max-chars", q.max_chars, "Drop documents longer than this (code points)")
      ->capture_default_str();
  cmd->add_option("--min-letter-ratio", q.min_letter_ratio, "Drop below this share of letters")
      ->capture_default_str();
  cmd->add_option("--max-special-ratio", q.max_special_ratio,
                  "Drop above this share of special characters (not letters, digits, "
                  "whitespace or prose punctuation)")
      ->capture_default_str();
  cmd->add_option("--stopwords", t->stopwords,
                  "Stop-word file (one word per line) replacing the built-in English + Russian lists");
  cmd->add_option("--min-stopwords", q.min_stopwords,
                  "Drop documents with fewer stop words; 0 turns the check off")
      ->capture_default_str();
  cmd->add_option("--script", t->script, "any, latin or cyrillic: the script kept documents are in")
      ->capture_default_str();
  cmd->add_option("--min-script-ratio", q.min_script_ratio,
                  "With --script: least share of letters in that script")
      ->capture_default_str();
  cmd->add_option("--simhash-threshold", o->cleaning.simhash_threshold,
                  "Near-duplicate distance in bits of the 64-bit SimHash")
      ->capture_default_str();
  cmd->add_option("--simhash-shingle", o->cleaning.simhash_shingle_words,
                  "Words per SimHash shingle (smaller catches one-word edits of short texts)")
      ->capture_default_str();
  cmd->add_option("--simhash-capacity", o->cleaning.simhash_capacity,
                  "Fingerprints remembered (FIFO, ~24 bytes each); 0 turns dedup off")
      ->capture_default_str();

  cmd->add_option("--tokenizer", t->tokenizer,
                  "bpe (train a byte-fallback BPE on the cleaned text) or gpt2 (--gpt2-dir)")
      ->capture_default_str();
  cmd->add_option("--gpt2-dir", t->gpt2_dir, "Folder with GPT-2's encoder.json and vocab.bpe (default: the ones gradbox ships, data/gpt2)");
  cmd->add_option("--vocab-size", o->vocab_size, "BPE vocabulary size")->capture_default_str();
  cmd->add_option("--bpe-max-sentences", o->bpe_max_sentences,
                  "Documents sampled for BPE training (bounds its memory)")
      ->capture_default_str();

  cmd->add_option("--val-fraction", o->val_fraction, "Share of documents in val.bin")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the train/val split and BPE sampling")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Tokenizer threads; 0: all cores")->capture_default_str();
  cmd->add_flag("--force", t->force, "Replace the dataset in a non-empty --out folder");

  cmd->callback([o, t] {
    data::PrepareOptions options = *o;
    options.out = t->out;
    options.format = data::parse_document_format(t->format);
    options.tokenizer = data::parse_tokenizer_choice(t->tokenizer);
    options.cleaning.quality.script = data::parse_script_filter(t->script);
    if (!t->stopwords.empty()) options.stopwords_file = t->stopwords;
    options.gpt2_dir = t->gpt2_dir;
    GB_REQUIRE(t->gpt2_dir.empty() || options.tokenizer == data::TokenizerChoice::gpt2,
               "--gpt2-dir is only used with --tokenizer gpt2");
    options.overwrite = t->force ? data::Overwrite::force : data::Overwrite::refuse;
    data::prepare_dataset(options);
  });
}

}  // namespace gradbox::cli
