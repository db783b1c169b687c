// GPT-2's pre-tokenizer: known splits, invalid UTF-8, and the ASCII fast path against PCRE2.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace gradbox::tokenizer {
namespace {

using Engine = Gpt2Pretokenizer::Engine;

std::vector<std::string> split(std::string_view text, Engine engine = Engine::ascii_fast_path) {
  static const Gpt2Pretokenizer fast(Engine::ascii_fast_path), pcre2(Engine::pcre2_only);
  std::vector<std::string> words;
  (engine == Engine::ascii_fast_path ? fast : pcre2).split(text, [&](std::string_view w) {
    words.emplace_back(w);
  });
  return words;
}

TEST(Gpt2Pretokenizer, SplitsLikeEncoderPy) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world's 42x!!  \n  end  "),
            (V{"Hello", " world", "'s", " 42", "x", "!!", "  \n ", " end", "  "}));
  EXPECT_EQ(split("I'LL it's"), (V{"I", "'", "LL", " it", "'s"}));  // contractions: lower case
  EXPECT_EQ(split("a \xC2\x85"
                  "b"),
            (V{"a", " ", "\xC2\x85", "b"}));  // U+0085 is whitespace
  EXPECT_EQ(split(""), V{});
}

TEST(Gpt2Pretokenizer, InvalidBytesBecomeWordsOfTheirOwn) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("ab\xFF\xFE"
                  "cd"),
            (V{"ab", "\xFF\xFE", "cd"}));
  EXPECT_EQ(split("\x80"), V{"\x80"});
  EXPECT_EQ(split("x \xC3"), (V{"x", " ", "\xC3"}));
  // Long runs do not exhaust the JIT stack.
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(split(spaces), V{spaces});
  std::string letters;
  for (int i = 0; i < 200'000; ++i) letters += "\xD0\xB6";  // ж
  EXPECT_EQ(split(letters), V{letters});
}

// Note [ASCII fast path]: every string of up to 4 symbols over an alphabet that covers each
// class, each contraction letter, and the non-ASCII bytes the fast path must hand to PCRE2.
TEST(Gpt2Pretokenizer, AsciiFastPathAgreesWithPcre2OnAllShortStrings) {
  const std::vector<std::string> alphabet = {"0",
                                             " ",
                                             "\t",
                                             "\n",
                                             "'",
                                             "s",
                                             "t",
                                             "r",
                                             "e",
                                             "v",
                                             "l",
                                             "m",
                                             "d",
                                             ".",
                                             "\x1C",
                                             "\xC3\xA9" /* é */,
                                             "\xC2\x85" /* NEL */,
                                             "\xE3\x80\x80" /* ideographic space */,
                                             "\xFF" /* invalid */,
                                             "\xC3" /* truncated */};
  std::vector<std::string> strings = {""};
  size_t checked = 0;
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> longer;
    for (const std::string& s : strings)
      for (const std::string& a : alphabet) longer.push_back(s + a);
    for (const std::string& s : longer) {
      ASSERT_EQ(split(s, Engine::ascii_fast_path), split(s, Engine::pcre2_only)) << "'" << s << "'";
      ++checked;
    }
    strings = std::move(longer);
  }
  EXPECT_EQ(checked, 20u + 20 * 20 + 20 * 20 * 20 + 20 * 20 * 20 * 20);
}

TEST(Gpt2Pretokenizer, AsciiFastPathAgreesWithPcre2OnRandomText) {
  std::mt19937 rng(13);
  for (int round = 0; round < 20; ++round) {
    std::string text = testing::random_utf8(rng, 5000);
    if (round % 2 == 1) {  // mostly ASCII, as English and code are
      for (char& c : text)
        if (static_cast<unsigned char>(c) >= 0x80 && rng() % 4 != 0) c = "a .'\n"[rng() % 5];
    }
    ASSERT_EQ(split(text, Engine::ascii_fast_path), split(text, Engine::pcre2_only));
  }
}

}  // namespace
}  // namespace gradbox::tokenizer
