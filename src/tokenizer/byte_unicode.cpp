#include "tokenizer/byte_unicode.h"

#include <cstdint>

namespace gradbox::tokenizer {
namespace {

constexpr char32_t kNoByte = 0xFFFFFFFF;
constexpr char32_t kMaxCodePoint = 0x100 + 68;  // every mapped code point is below this

std::array<char32_t, 256> make_byte_to_code_point() {
  std::array<char32_t, 256> table{};
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? static_cast<char32_t>(b) : next_extra++;
  }
  return table;
}

std::array<uint32_t, kMaxCodePoint> make_code_point_to_byte() {
  std::array<uint32_t, kMaxCodePoint> table;
  table.fill(kNoByte);
  const auto& forward = byte_to_code_point();
  for (int b = 0; b < 256; ++b) table[forward[b]] = static_cast<uint32_t>(b);
  return table;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // the alphabet needs at most two bytes
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

const std::array<char32_t, 256>& byte_to_code_point() {
  static const std::array<char32_t, 256> table = make_byte_to_code_point();
  return table;
}

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  static const std::array<uint32_t, kMaxCodePoint> inverse = make_code_point_to_byte();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto c0 = static_cast<unsigned char>(token[i]);
    char32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      cp = ((c0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      if (cp < 0x80) return std::nullopt;  // overlong encoding
      i += 2;
    } else {
      return std::nullopt;  // longer sequences are outside the alphabet (or not UTF-8)
    }
    if (cp >= kMaxCodePoint || inverse[cp] == kNoByte) return std::nullopt;
    bytes += static_cast<char>(inverse[cp]);
  }
  return bytes;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& forward = byte_to_code_point();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(forward[static_cast<unsigned char>(c)], out);
  return out;
}

}  // namespace gradbox::tokenizer
