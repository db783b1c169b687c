// train_bpe(): a byte-fallback BPE trained by SentencePiece, with settings that keep every byte.
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/log.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::tokenizer {
namespace fs = std::filesystem;
namespace {

// 256 byte pieces + <unk>, <s>, </s>: the smallest vocabulary that can hold anything else.
constexpr int32_t kReservedPieces = 259;
// Longer lines are skipped by the trainer (SentencePiece's default is 4192 bytes); documents
// are long, and the sample size bounds memory anyway.
constexpr int kMaxSentenceBytes = 1 << 16;
constexpr const char* kWhitespacePieces = "allow_whitespace_only_pieces";

// Feeds the corpus line by line: SentencePiece's own reader would split a path at commas.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const fs::path& path) : path_(path), in_(path, std::ios::binary) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    done_ = !std::getline(in_, line_);
    if (done_ && in_.bad())
      status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal,
                                            path_.string() + ": read failed");
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  fs::path path_;
  std::ifstream in_;
  std::string line_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

}  // namespace

std::unique_ptr<Tokenizer> train_bpe(const fs::path& corpus, const BpeTrainOptions& options,
                                     const fs::path& out_dir) {
  GB_REQUIRE(fs::is_regular_file(corpus), corpus.string(), ": corpus file not found");
  GB_REQUIRE(fs::file_size(corpus) > 0, corpus.string(), ": corpus file is empty");
  GB_REQUIRE(options.vocab_size > kReservedPieces, "train_bpe: vocab_size ", options.vocab_size,
             " is too small: byte fallback and <unk>, <s>, </s> alone take ", kReservedPieces,
             " pieces");
  GB_REQUIRE(options.max_sentences > 0, "train_bpe: max_sentences must be positive, got ",
             options.max_sentences);
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  // identity + no whitespace removal + no dummy prefix + byte_fallback: text comes back byte
  // for byte. split_digits: numbers as single digits, as in Llama. Whitespace-only pieces let
  // indentation and blank runs cost few tokens.
  std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"split_digits", "true"},
      {kWhitespacePieces, "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "1"},  // SentencePiece's own INFO lines; warnings still show
  };
  log::Logger logger("tokenizer");
  logger.info(str("training a ", options.vocab_size, "-piece BPE on ", corpus.string(),
                  " (<= ", options.max_sentences, " lines, ", threads, " threads)"));
  std::string model;
  auto train = [&] {
    sentencepiece::SetRandomGeneratorSeed(options.seed);
    LineIterator lines(corpus);
    return sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  };
  auto status = train();
  // SentencePiece before 0.1.96 (Debian 11's 0.1.95) has no whitespace-only pieces: train
  // without them there rather than not at all; the model still keeps every byte.
  if (!status.ok() && status.ToString().find(kWhitespacePieces) != std::string::npos) {
    logger.warn(str("this SentencePiece has no ", kWhitespacePieces,
                    " (older than 0.1.96); training without whitespace-only pieces"));
    args.erase(kWhitespacePieces);
    model.clear();
    status = train();
  }
  GB_REQUIRE(status.ok(), corpus.string(), ": SentencePiece could not train a ", options.vocab_size,
             "-piece BPE (is the corpus too small for this vocab size?): ", status.ToString());

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  GB_REQUIRE(!ec, out_dir.string(), ": cannot create directory: ", ec.message());
  const fs::path model_path = out_dir / "spm.model";
  write_file_atomic(model_path, model);
  auto tokenizer = std::make_unique<SentencePieceTokenizer>(std::move(model), model_path);
  GB_CHECK(tokenizer->byte_exact(), model_path, ": trained model does not round-trip bytes");
  logger.info(str("wrote ", model_path.string(), " (", tokenizer->vocab_size(), " pieces)"));
  return tokenizer;
}

}  // namespace gradbox::tokenizer
