// GPT-2 byte-level BPE on the official files: golden ids, agreement with encoder.py's merge
// loop, byte-exact round trips (invalid UTF-8 included), concurrency.
#include "tokenizer/gpt2_bpe.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "reference_bpe.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"

namespace gradbox::tokenizer {
namespace {

using testing::gpt2_dir;
using testing::random_bytes;
using testing::random_utf8;
using testing::ReferenceBpe;

struct Golden {
  std::string_view text;
  std::vector<int32_t> ids;
};

// Produced by tests/tokenizer/make_gpt2_golden.py on the official files: it runs OpenAI's
// encoder.py algorithm (with the `regex` module) and Hugging Face transformers 5.24
// GPT2Tokenizer(vocab=encoder.json, merges=vocab.bpe) with split_special_tokens=True, checks
// that both give the same ids, and prints these rows.
// clang-format off
const Golden kGolden[] = {
    {"Hello world",
     {15496, 995}},
    {"The quick brown fox jumps over the lazy dog.",
     {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
    {"I'm sure they'll say it's what we've done, isn't it? You're right, I'd've known.",
     {40, 1101, 1654, 484, 1183, 910, 340, 338, 644, 356, 1053, 1760, 11, 2125, 470, 340, 30,
      921, 821, 826, 11, 314, 1549, 1053, 1900, 13}},
    {"Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
     {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0, 12466, 94,
      141, 232, 16843, 141, 230, 45367, 12466, 114, 16843, 12466, 113, 141, 231, 141, 239, 220,
      141, 235, 20375, 18849, 141, 227, 12466, 120, 40623, 140, 111, 31583, 18849, 141, 227,
      220, 141, 226, 21169, 16142, 22177, 141, 228, 35072, 140, 115, 21727, 31583, 18849, 141,
      227, 12466, 109, 35072, 30143, 25443, 118, 11, 12466, 112, 16142, 12466, 110, 45035, 140,
      123, 16843, 140, 117, 220, 141, 229, 16142, 141, 236, 13}},
    {"Emoji: 😀👍🏽 and flags 🇺🇦🇯🇵, family 👨\xE2\x80\x8D👩\xE2\x80\x8D👧.",
     {36, 5908, 7285, 25, 30325, 222, 41840, 235, 8582, 237, 121, 290, 9701, 12520, 229, 118,
      8582, 229, 99, 8582, 229, 107, 8582, 229, 113, 11, 1641, 50169, 101, 447, 235, 41840, 102,
      447, 235, 41840, 100, 13}},
    {"中文分词测试：我爱北京天安门。日本語のテキストです。한국어 문장.",
     {40792, 23877, 229, 26344, 228, 46237, 235, 38184, 233, 46237, 243, 171, 120, 248, 22755,
      239, 163, 230, 109, 44293, 245, 12859, 105, 25465, 22522, 231, 29785, 101, 16764, 33768,
      98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302, 30640, 33623, 16764, 47991, 250,
      166, 113, 255, 168, 244, 112, 31619, 105, 116, 168, 252, 98, 13}},
    {"Numbers 1234567890 3.14159 2024-01-01 and 1,000,000.",
     {49601, 17031, 2231, 30924, 3829, 513, 13, 1415, 19707, 48609, 12, 486, 12, 486, 290, 352,
      11, 830, 11, 830, 13}},
    {"  leading spaces, tabs\x09\x09"
     "and\x0Anewlines\x0A\x0A\x0A  trailing spaces   ",
     {220, 3756, 9029, 11, 22524, 197, 197, 392, 198, 3605, 6615, 628, 198, 220, 25462, 9029,
      220, 220, 220}},
    {"def f(x):\x0A    return x ** 2  # comment\x0A\x09return\x0D\x0A",
     {4299, 277, 7, 87, 2599, 198, 220, 220, 220, 1441, 2124, 12429, 362, 220, 1303, 2912, 198,
      197, 7783, 201, 198}},
    {"<|endoftext|> is plain text here",
     {27, 91, 437, 1659, 5239, 91, 29, 318, 8631, 2420, 994}},
    {"mixed\xC2\xA0nbsp\xE2\x80\x83"
     "em\xE3\x80\x80ideographic \xC2\x85nel \xE2\x80\x8Bzwsp\x1C\x1D end \xC2\x85",
     {76, 2966, 1849, 77, 24145, 447, 225, 368, 5099, 222, 485, 6826, 220, 126, 227, 4954,
      20126, 89, 86, 2777, 216, 217, 886, 1587, 227}},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaa!!!",
     {24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794,
      24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 24794, 10185}},
    {"new a\xF0\xB1\x8D\x90"
     "b \xF0\x9E\x93\xB0\xF0\x9E\x93\xB1x \xD5\x98z",
     {3605, 257, 172, 109, 235, 238, 65, 220, 172, 252, 241, 108, 172, 252, 241, 109, 87, 220,
      145, 246, 89}},
};
// clang-format on

std::unique_ptr<Gpt2BpeTokenizer> load_official() {
  const fs::path encoder = gpt2_dir() / "encoder.json", merges = gpt2_dir() / "vocab.bpe";
  return std::make_unique<Gpt2BpeTokenizer>(read_file(encoder), read_file(merges), encoder, merges);
}

// Loading parses 1.5 MB of files: once per test binary.
const Gpt2BpeTokenizer& official() {
  static const std::unique_ptr<Gpt2BpeTokenizer> tokenizer = load_official();
  return *tokenizer;
}

const ReferenceBpe& reference() {
  static const ReferenceBpe bpe(gpt2_dir() / "encoder.json", gpt2_dir() / "vocab.bpe");
  return bpe;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

class Gpt2Bpe : public ::testing::Test {
 protected:
  void SetUp() override { GB_REQUIRE_GPT2_FILES(); }
};

TEST_F(Gpt2Bpe, KnownIdsAndMetadata) {
  const Gpt2BpeTokenizer& tok = official();
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_id(), 50256);
  EXPECT_EQ(tok.kind(), "gpt2-bpe");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{tok.eot_id()}), "<|endoftext|>");
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST_F(Gpt2Bpe, MatchesGoldenIdsAndRoundTrips) {
  const Gpt2BpeTokenizer& tok = official();
  for (const Golden& g : kGolden) {
    EXPECT_EQ(tok.encode(g.text), g.ids) << g.text;
    EXPECT_EQ(tok.decode(g.ids), g.text);
    EXPECT_EQ(tok.encode(g.text), g.ids) << "second encode, from the word cache: " << g.text;
  }
}

TEST_F(Gpt2Bpe, EndOfTextInTheTextIsOrdinaryText) {
  const Gpt2BpeTokenizer& tok = official();
  const std::vector<int32_t> ids = tok.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eot_id()), 0);
  EXPECT_GT(ids.size(), 3u);
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|>b");
}

// The heap-based merge (Note [BPE merge order]) against encoder.py's loop, word by word, on
// random words of all scripts and on long words where the two algorithms differ most.
TEST_F(Gpt2Bpe, MergesAgreeWithEncoderPyOnRandomAndLongWords) {
  const Gpt2BpeTokenizer& tok = official();
  std::mt19937 rng(7);
  const std::string text = random_utf8(rng, 40'000);
  std::set<std::string_view> words;
  Gpt2Pretokenizer().split(text, [&](std::string_view w) { words.insert(w); });
  ASSERT_GT(words.size(), 2000u);
  std::vector<std::string> long_words = {std::string(20'000, ' '), std::string(3000, 'a'),
                                         std::string(999, '='), random_bytes(rng, 3000)};
  std::string cjk;  // Chinese has no spaces: a paragraph is one word
  for (int i = 0; i < 600; ++i) testing::append_utf8(0x4E00 + rng() % 0x5000, cjk);
  long_words.push_back(cjk);
  for (const std::string& w : long_words) words.insert(w);
  size_t checked = 0;
  for (std::string_view word : words) {
    std::vector<int32_t> ids;
    tok.encode_word_uncached(word, ids);
    ASSERT_EQ(ids, reference().encode_word(word)) << "word of " << word.size() << " bytes";
    ++checked;
  }
  EXPECT_EQ(checked, words.size());
}

TEST_F(Gpt2Bpe, WholeTextEncodeIsWordByWordReference) {
  const Gpt2BpeTokenizer& tok = official();
  std::mt19937 rng(11);
  const std::string text = random_utf8(rng, 20'000);
  std::vector<int32_t> expected;
  Gpt2Pretokenizer().split(text, [&](std::string_view w) {
    const std::vector<int32_t> ids = reference().encode_word(w);
    expected.insert(expected.end(), ids.begin(), ids.end());
  });
  EXPECT_EQ(tok.encode(text), expected);
}

TEST_F(Gpt2Bpe, RandomUtf8RoundTripsByteExact) {
  const Gpt2BpeTokenizer& tok = official();
  std::mt19937 rng(3);
  const std::string text = random_utf8(rng, 200'000);
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_LT(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);
}

TEST_F(Gpt2Bpe, InvalidUtf8RoundTripsAndLeavesValidTextAlone) {
  const Gpt2BpeTokenizer& tok = official();
  const std::vector<int32_t> ff = tok.encode("\xFF");
  ASSERT_EQ(ff.size(), 1u);
  EXPECT_EQ(tok.decode(ff), "\xFF");
  // The invalid byte is a word of its own between two ordinary words.
  EXPECT_EQ(tok.encode("Hello\xFFworld"), concat({tok.encode("Hello"), ff, tok.encode("world")}));
  using namespace std::string_view_literals;
  for (std::string_view text :
       {"ab\xE2\x82"sv, "\xC3"sv, "\x80\x80 x"sv, "\xED\xA0\x80 surrogate"sv,
        "\xF4\x90\x80\x80 too big"sv, "\xC0\xAF overlong"sv, "nul\0nul"sv}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
  std::mt19937 rng(5);
  const std::string bytes = random_bytes(rng, 100'000);
  EXPECT_EQ(tok.decode(tok.encode(bytes)), bytes);
  // Valid text with invalid bytes sprinkled in.
  std::string mixed = random_utf8(rng, 20'000);
  for (size_t i = 0; i < mixed.size(); i += 97) mixed[i] = static_cast<char>(0x80 | (rng() & 0x7F));
  EXPECT_EQ(tok.decode(tok.encode(mixed)), mixed);
}

TEST_F(Gpt2Bpe, DecodeRejectsIdsOutsideTheVocabulary) {
  const Gpt2BpeTokenizer& tok = official();
  for (int32_t bad : {-1, 50257, 1 << 30}) {
    const std::vector<int32_t> ids = {15496, bad};
    try {
      tok.decode(ids);
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    }
  }
}

// Threads share the word cache; a fresh tokenizer so that they fill it at the same time.
TEST_F(Gpt2Bpe, ConcurrentEncodesMatchSerialOnes) {
  const std::unique_ptr<Gpt2BpeTokenizer> fresh = load_official();
  constexpr int kThreads = 4;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  std::mt19937 rng(9);
  for (int t = 0; t < kThreads; ++t) {
    texts.push_back(random_utf8(rng, 30'000) + std::string(kGolden[t].text));
    expected.push_back(official().encode(texts.back()));
  }
  std::vector<std::vector<int32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) got[t] = fresh->encode(texts[t]);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], expected[t]) << "thread " << t;
}

}  // namespace
}  // namespace gradbox::tokenizer
