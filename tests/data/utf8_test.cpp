#include "data/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gradbox::data::utf8 {
namespace {

std::vector<char32_t> decode_all(std::string_view text) {
  std::vector<char32_t> out;
  size_t pos = 0;
  while (pos < text.size()) out.push_back(decode(text, pos));
  return out;
}

TEST(Utf8, DecodesAllSequenceLengths) {
  // A, é (2 bytes), Ж (2), 中 (3), 😀 (4)
  EXPECT_EQ(decode_all("A\xC3\xA9\xD0\x96\xE4\xB8\xAD\xF0\x9F\x98\x80"),
            (std::vector<char32_t>{U'A', 0xE9, 0x416, 0x4E2D, 0x1F600}));
  EXPECT_EQ(count_code_points("A\xC3\xA9\xD0\x96\xE4\xB8\xAD\xF0\x9F\x98\x80"), 5);
}

TEST(Utf8, InvalidBytesBecomeOneReplacementEach) {
  const std::string cases[] = {
      "\x80",              // stray continuation byte
      "\xC3",              // truncated 2-byte sequence at the end
      "\xE4\xB8",          // truncated 3-byte sequence
      "\xC0\xAF",          // overlong '/'
      "\xED\xA0\x80",      // UTF-16 surrogate
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xFF",
  };
  for (const std::string& bad : cases) {
    const std::vector<char32_t> cps = decode_all(bad);
    ASSERT_EQ(cps.size(), bad.size()) << "one step per byte for " << bad.size() << " bytes";
    EXPECT_EQ(cps[0], kReplacement);
    EXPECT_EQ(count_code_points(bad), static_cast<int64_t>(bad.size()));
  }
  // Decoding resumes on the next valid character.
  EXPECT_EQ(decode_all("\xE4\xB8Z"), (std::vector<char32_t>{kReplacement, kReplacement, U'Z'}));
}

TEST(Utf8, AppendRoundTrips) {
  for (char32_t cp : {char32_t{0x41}, char32_t{0xE9}, char32_t{0x416}, char32_t{0x4E2D},
                      char32_t{0x1F600}, char32_t{0x10FFFF}}) {
    std::string s;
    append(s, cp);
    size_t pos = 0;
    EXPECT_EQ(decode(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(Utf8, ClassifiesScriptsAndClasses) {
  EXPECT_EQ(classify(U'a').cls, CharClass::letter);
  EXPECT_EQ(classify(U'a').script, Script::latin);
  EXPECT_EQ(classify(0xE9).script, Script::latin);    // é
  EXPECT_EQ(classify(0x159).script, Script::latin);   // ř (Extended-A)
  EXPECT_EQ(classify(0x1EA1).script, Script::latin);  // ạ (Extended Additional)
  EXPECT_EQ(classify(0x3B1).script, Script::greek);   // α
  EXPECT_EQ(classify(0x416).script, Script::cyrillic);  // Ж
  EXPECT_EQ(classify(0x451).script, Script::cyrillic);  // ё
  EXPECT_EQ(classify(0x4E2D).script, Script::cjk);      // 中
  EXPECT_EQ(classify(0x3042).script, Script::cjk);      // あ
  EXPECT_EQ(classify(0xAC00).script, Script::cjk);      // 가
  EXPECT_EQ(classify(0x5D0).cls, CharClass::letter);    // א
  EXPECT_EQ(classify(0x301).cls, CharClass::letter);    // combining acute
  EXPECT_EQ(classify(0x301).script, Script::none);
  EXPECT_EQ(classify(U'7').cls, CharClass::digit);
  EXPECT_EQ(classify(0xFF17).cls, CharClass::digit);    // fullwidth 7
  EXPECT_EQ(classify(U' ').cls, CharClass::space);
  EXPECT_EQ(classify(0xA0).cls, CharClass::space);
  EXPECT_EQ(classify(0x3000).cls, CharClass::space);
  for (char32_t p : {U'.', U',', U'!', U'?', U'"', U'\'', U'(', U'-', char32_t{0x2014},
                     char32_t{0xAB}, char32_t{0x2026}, char32_t{0x3002}, char32_t{0x2116}})
    EXPECT_EQ(classify(p).cls, CharClass::punct) << std::hex << static_cast<uint32_t>(p);
  for (char32_t x : {U'#', U'$', U'%', U'&', U'*', U'+', U'/', U'<', U'=', U'>', U'@', U'[',
                     U'\\', U'^', U'_', U'`', U'{', U'|', U'~', char32_t{0x7F}, char32_t{0x0},
                     char32_t{0x2500}, char32_t{0x1F600}, char32_t{0xE000}, char32_t{0x200B},
                     kReplacement})
    EXPECT_EQ(classify(x).cls, CharClass::special) << std::hex << static_cast<uint32_t>(x);
}

TEST(Utf8, FoldsCase) {
  EXPECT_EQ(fold_case(U'A'), U'a');
  EXPECT_EQ(fold_case(U'z'), U'z');
  EXPECT_EQ(fold_case(0xC9), 0xE9u);    // É -> é
  EXPECT_EQ(fold_case(0xD7), 0xD7u);    // × unchanged
  EXPECT_EQ(fold_case(0x158), 0x159u);  // Ř -> ř
  EXPECT_EQ(fold_case(0x178), 0xFFu);   // Ÿ -> ÿ
  EXPECT_EQ(fold_case(0x394), 0x3B4u);  // Δ -> δ
  EXPECT_EQ(fold_case(0x3C2), 0x3C3u);  // ς -> σ
  EXPECT_EQ(fold_case(0x416), 0x436u);  // Ж -> ж
  EXPECT_EQ(fold_case(0x401), 0x435u);  // Ё -> е
  EXPECT_EQ(fold_case(0x451), 0x435u);  // ё -> е
  EXPECT_EQ(fold_case(0x406), 0x456u);  // І -> і
  EXPECT_EQ(fold_case(0x4E2D), 0x4E2Du);
}

}  // namespace
}  // namespace gradbox::data::utf8
