// GPT-2's byte alphabet.
#include "tokenizer/byte_unicode.h"

#include <gtest/gtest.h>

namespace gradbox::tokenizer {
namespace {

TEST(ByteUnicode, KnownCharactersAndFullRoundTrip) {
  EXPECT_EQ(bytes_to_byte_level(" "), "\xC4\xA0");   // "Ġ", U+0120
  EXPECT_EQ(bytes_to_byte_level("\n"), "\xC4\x8A");  // "Ċ", U+010A
  EXPECT_EQ(bytes_to_byte_level("a!~"), "a!~");
  EXPECT_EQ(byte_to_code_point()[0], 0x100u);
  EXPECT_EQ(byte_to_code_point()[0xAD], 0x100u + 67);  // soft hyphen: the last remapped byte
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
}

TEST(ByteUnicode, RejectsCharactersOutsideTheAlphabet) {
  EXPECT_FALSE(byte_level_to_bytes("\xE2\x82\xAC").has_value());  // €
  EXPECT_FALSE(byte_level_to_bytes(" ").has_value());             // a space is spelled Ġ
  EXPECT_FALSE(byte_level_to_bytes("\xC4").has_value());          // truncated
  EXPECT_FALSE(byte_level_to_bytes("\xC0\xA1").has_value());      // overlong "!"
  EXPECT_EQ(byte_level_to_bytes(""), "");
}

}  // namespace
}  // namespace gradbox::tokenizer
