// SentencePiece: train_bpe() on small generated and real corpora, byte-exact round trips,
// save/load under both names, bad corpora and models, and models trained elsewhere.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "test_util.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::tokenizer {
namespace {

using namespace std::string_view_literals;
using testing::random_bytes;
using testing::random_utf8;
using testing::TempDir;

constexpr int32_t kVocab = 400;

// ~25 KB of English-like lines from a fixed word list: enough for a 400-piece vocabulary.
std::string english_corpus() {
  static const char* kWords[] = {
      "the",      "model", "learns", "from",    "data",    "and",     "every",  "token",
      "counts",   "when",  "we",     "train",   "on",      "large",   "text",   "corpora",
      "gradient", "steps", "move",   "weights", "toward",  "lower",   "loss",   "while",
      "workers",  "share", "their",  "updates", "through", "a",       "folder", "in",
      "the",      "cloud", "It's",   "1024",    "tokens,", "(batch)", "2.5%",   "x=y+1;",
  };
  std::mt19937 rng(1);
  std::string text;
  for (int line = 0; line < 500; ++line) {
    const int n = 4 + static_cast<int>(rng() % 10);
    if (line % 7 == 0) text += "  ";  // leading spaces and indentation occur in real text
    for (int i = 0; i < n; ++i) {
      if (i > 0) text += (rng() % 13 == 0) ? "  " : " ";
      text += kWords[rng() % std::size(kWords)];
    }
    text += ".\n";
  }
  return text;
}

struct Trained {
  TempDir dir;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Training takes ~0.1 s: once per test binary.
const Trained& trained() {
  static const std::unique_ptr<Trained> t = [] {
    auto t = std::make_unique<Trained>();
    write_file_atomic(t->dir.path() / "corpus.txt", english_corpus());
    BpeTrainOptions options;
    options.vocab_size = kVocab;
    options.threads = 2;
    t->tokenizer = train_bpe(t->dir.path() / "corpus.txt", options, t->dir.path() / "model");
    return t;
  }();
  return *t;
}

const SentencePieceTokenizer& as_spm(const Tokenizer& tok) {
  return dynamic_cast<const SentencePieceTokenizer&>(tok);
}

template <class Fn>
void expect_input_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
  }
}

// Text SentencePiece alone would not give back byte for byte.
const std::string_view kHardTexts[] = {
    "Привет, мир! Съешь же ещё этих мягких французских булок."sv,
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flags 🇺🇦"sv,
    "   leading spaces"sv,
    "trailing spaces   "sv,
    "  runs   of    spaces  "sv,
    "tabs\t\tand\nnew\n\nlines\r\n"sv,
    "\n"sv,
    " "sv,
    "\xE2\x96\x81 is SentencePiece's space: \xE2\x96\x81\xE2\x96\x81 x\xE2\x96\x81y"sv,
    "invalid \xFF\xFE utf-8 \xC3 and truncated \xE2\x82"sv,
    "nul\0byte"sv,
    "ﬁ ligature, Ａ full width, e\u0301 combining"sv,
    "中文分词测试 12345 3.14"sv,
};

TEST(SentencePieceTrain, MakesAByteExactModelOfTheRequestedSize) {
  const Tokenizer& tok = *trained().tokenizer;
  EXPECT_EQ(tok.kind(), "sentencepiece");
  EXPECT_EQ(tok.vocab_size(), kVocab);
  EXPECT_EQ(tok.eot_id(), 2);
  EXPECT_TRUE(as_spm(tok).byte_exact());
  EXPECT_TRUE(as_spm(tok).segmented());
  EXPECT_TRUE(fs::is_regular_file(trained().dir.path() / "model" / "spm.model"));
  // It learnt merges: in-domain text takes far fewer tokens than bytes.
  const std::string line = "the model learns from data and every token counts.";
  const std::vector<int32_t> ids = tok.encode(line);
  EXPECT_LT(ids.size() * 2, line.size());
  for (int32_t id : ids) EXPECT_GT(id, tok.eot_id()) << "no <unk>, <s>, </s> from encode";
  EXPECT_EQ(tok.decode(ids), line);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(SentencePieceTrain, SegmentsEncodeLikeWholeTextSentencePiece) {
  const Tokenizer& tok = *trained().tokenizer;
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(
      sp.LoadFromSerializedProto(read_file(trained().dir.path() / "model" / "spm.model")).ok());
  std::mt19937 rng(4);
  std::string text = english_corpus() + random_utf8(rng, 5000);
  for (size_t i = 0; i < text.size(); ++i)  // no escapes: SentencePiece alone keeps this text
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) text[i + 2] = '\x80';
  for (std::string_view part : {std::string_view(text), std::string_view(" a  b   c "),
                                std::string_view("   "), std::string_view("x")}) {
    const std::vector<int> whole = sp.EncodeAsIds({part.data(), part.size()});  // its string_view before 0.1.97
    EXPECT_EQ(tok.encode(part), std::vector<int32_t>(whole.begin(), whole.end()));
  }
}

TEST(SentencePieceTrain, RoundTripsAnyBytesExactly) {
  const Tokenizer& tok = *trained().tokenizer;
  for (std::string_view text : kHardTexts) EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.encode("\xE2\x96\x81").size(), 3u) << "escaped as its three byte pieces";
  std::mt19937 rng(2);
  const std::string utf8 = random_utf8(rng, 20'000);
  EXPECT_EQ(tok.decode(tok.encode(utf8)), utf8);
  const std::string bytes = random_bytes(rng, 20'000);
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  // Documents encoded one by one concatenate: no dummy prefix to strip at decode.
  const std::vector<int32_t> a = tok.encode(" a b"), b = tok.encode(" c");
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  EXPECT_EQ(tok.decode(ab), " a b c");
}

TEST(SentencePieceTrain, SameSeedGivesTheSameModel) {
  TempDir dir;
  write_file_atomic(dir.path() / "corpus.txt", english_corpus());
  BpeTrainOptions options;
  options.vocab_size = kVocab;
  options.threads = 2;
  train_bpe(dir.path() / "corpus.txt", options, dir.path() / "again");
  EXPECT_EQ(read_file(dir.path() / "again" / "spm.model"),
            read_file(trained().dir.path() / "model" / "spm.model"));
}

TEST(SentencePieceTrain, SaveAndSaveHfLoadBack) {
  const Tokenizer& tok = *trained().tokenizer;
  TempDir dir;
  const std::string text = "the cloud  folder\n\xFF";
  const std::vector<int32_t> ids = tok.encode(text);
  tok.save(dir.path() / "own");
  tok.save_hf(dir.path() / "hf");
  EXPECT_TRUE(fs::is_regular_file(dir.path() / "own" / "spm.model"));
  EXPECT_EQ(read_file(dir.path() / "hf" / "tokenizer.model"),
            read_file(dir.path() / "own" / "spm.model"));
  for (const char* sub : {"own", "hf"}) {
    auto loaded = load_tokenizer(dir.path() / sub);
    EXPECT_EQ(loaded->kind(), "sentencepiece");
    EXPECT_EQ(loaded->vocab_size(), kVocab);
    EXPECT_EQ(loaded->encode(text), ids) << sub;
    EXPECT_EQ(loaded->decode(ids), text) << sub;
  }
}

TEST(SentencePieceTrain, RussianFortunes) {
  const fs::path ru = "/usr/share/games/fortunes/ru";
  if (!fs::is_directory(ru)) GTEST_SKIP() << ru << " not found (Debian package fortunes-ru)";
  std::string corpus;
  for (const char* name : {"2001.03", "2001.04", "2001.05", "2001.06"}) {
    if (fs::is_regular_file(ru / name)) corpus += read_file(ru / name);
  }
  if (corpus.size() < 20'000) GTEST_SKIP() << "too little text in " << ru;
  TempDir dir;
  write_file_atomic(dir.path() / "corpus.txt", corpus);
  BpeTrainOptions options;
  options.vocab_size = 1000;
  options.threads = 2;
  auto tok = train_bpe(dir.path() / "corpus.txt", options, dir.path() / "model");
  EXPECT_EQ(tok->vocab_size(), 1000);
  const std::vector<int32_t> ids = tok->encode(corpus);
  EXPECT_EQ(tok->decode(ids), corpus);
  // Note [SentencePiece segments]: cached segments give what SentencePiece gives on the whole.
  ASSERT_TRUE(as_spm(*tok).segmented());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(read_file(dir.path() / "model" / "spm.model")).ok());
  const std::vector<int> whole = sp.EncodeAsIds(corpus);
  EXPECT_EQ(ids, std::vector<int32_t>(whole.begin(), whole.end()));
  EXPECT_LT(ids.size() * 3, corpus.size()) << "Cyrillic takes 2 bytes a letter";
  for (std::string_view text : kHardTexts) EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(SentencePieceTrain, CorpusTooSmallForTheVocabulary) {
  TempDir dir;
  write_file_atomic(dir.path() / "tiny.txt", "just a few words\nand another line\n");
  BpeTrainOptions options;
  options.vocab_size = 5000;
  // SentencePiece's own message names the largest size it could reach.
  expect_input_error([&] { train_bpe(dir.path() / "tiny.txt", options, dir.path() / "m"); },
                     {(dir.path() / "tiny.txt").string(), "5000", "Vocabulary size too high"});
  EXPECT_FALSE(fs::exists(dir.path() / "m" / "spm.model"));
}

TEST(SentencePieceTrain, BadArguments) {
  TempDir dir;
  write_file_atomic(dir.path() / "corpus.txt", english_corpus());
  write_file_atomic(dir.path() / "empty.txt", "");
  BpeTrainOptions options;
  expect_input_error([&] { train_bpe(dir.path() / "absent.txt", options, dir.path() / "m"); },
                     {"absent.txt", "not found"});
  expect_input_error([&] { train_bpe(dir.path() / "empty.txt", options, dir.path() / "m"); },
                     {"empty.txt", "empty"});
  options.vocab_size = 259;
  expect_input_error([&] { train_bpe(dir.path() / "corpus.txt", options, dir.path() / "m"); },
                     {"vocab_size 259", "too small"});
}

TEST(SentencePieceLoad, CorruptOrMissingModel) {
  TempDir dir;
  write_file_atomic(dir.path() / "spm.model", "this is not a protobuf");
  expect_input_error([&] { load_tokenizer(dir.path()); },
                     {(dir.path() / "spm.model").string(), "not a valid SentencePiece model"});
  expect_input_error([&] { load_sentencepiece(dir.path() / "tokenizer.model"); },
                     {"tokenizer.model", "cannot open"});
}

TEST(SentencePieceLoad, DecodeRejectsIdsOutsideTheVocabulary) {
  const Tokenizer& tok = *trained().tokenizer;
  for (int32_t bad : {-1, kVocab}) {
    const std::vector<int32_t> ids = {5, bad};
    expect_input_error([&] { tok.decode(ids); }, {std::to_string(bad), "position 1"});
  }
}

// A model made elsewhere with SentencePiece's defaults (NFKC, dummy prefix, whitespace
// removal), under Hugging Face's name: both ways go through SentencePiece unchanged.
TEST(SentencePieceLoad, ForeignModelBehavesAsSentencePieceDoes) {
  TempDir dir;
  write_file_atomic(dir.path() / "corpus.txt", english_corpus());
  std::string model;
  const auto status =
      sentencepiece::SentencePieceTrainer::Train({{"model_type", "bpe"},
                                                  {"vocab_size", "300"},
                                                  {"minloglevel", "1"},
                                                  {"input", (dir.path() / "corpus.txt").string()}},
                                                 nullptr, &model);
  ASSERT_TRUE(status.ok()) << status.ToString();
  write_file_atomic(dir.path() / "tokenizer.model", model);
  auto tok = load_tokenizer(dir.path());
  ASSERT_EQ(tok->kind(), "sentencepiece");
  EXPECT_FALSE(as_spm(*tok).byte_exact());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(model).ok());
  const std::string text = "the  model learns ﬁ";
  const std::vector<int> expected = sp.EncodeAsIds(text);
  EXPECT_EQ(tok->encode(text), std::vector<int32_t>(expected.begin(), expected.end()));
  EXPECT_EQ(tok->decode(tok->encode(text)), sp.DecodeIds(expected));
  EXPECT_EQ(tok->decode(tok->encode("the model")), "the model");
  EXPECT_EQ(tok->eot_id(), sp.eos_id());
}

}  // namespace
}  // namespace gradbox::tokenizer
