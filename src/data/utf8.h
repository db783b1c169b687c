#pragma once
// A small, self-contained UTF-8 decoder and code point classification for the text filters.
// Not a Unicode database: it knows the blocks that matter for web-scale prose (Latin with its
// extensions, Greek, Cyrillic, CJK, plus coarse "letter" ranges for other scripts), which is
// enough to compute letter / special-character ratios and the share of a script.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gradbox::data::utf8 {

constexpr char32_t kReplacement = 0xFFFD;

namespace detail {
char32_t decode_multibyte(std::string_view text, size_t& pos);
}  // namespace detail

// Decodes the code point that starts at text[pos] and advances pos past it. Invalid input
// (stray continuation byte, truncated or overlong sequence, surrogate, > U+10FFFF) yields
// kReplacement and consumes exactly one byte, so decoding never stalls and never reads past
// the end. Inline for the ASCII case: the filters call it once per character.
inline char32_t decode(std::string_view text, size_t& pos) {
  const auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  return detail::decode_multibyte(text, pos);
}

// Number of decode() steps over the text: the "characters" of the length filter.
int64_t count_code_points(std::string_view text);

void append(std::string& out, char32_t cp);

// What a code point is for the filters. "punct" is ordinary prose punctuation, which is neither
// a letter nor special; see classify() in utf8.cpp for the exact sets.
enum class CharClass : uint8_t { letter, digit, space, punct, special };

// The writing system of a letter: letters of scripts not listed are "other"; non-letters and
// combining marks (which belong to the letter before them) are "none".
enum class Script : uint8_t { none, latin, greek, cyrillic, cjk, other };

struct CodePointInfo {
  CharClass cls;
  Script script;
};

namespace detail {
extern const std::array<CodePointInfo, 128> kAsciiInfo;
CodePointInfo classify_non_ascii(char32_t cp);
char32_t fold_non_ascii(char32_t cp);
}  // namespace detail

inline CodePointInfo classify(char32_t cp) {
  return cp < 0x80 ? detail::kAsciiInfo[cp] : detail::classify_non_ascii(cp);
}

// Simple one-to-one case folding for Latin (ASCII, Latin-1, Extended-A, Extended Additional),
// Greek and Cyrillic; also folds Greek final sigma to sigma and Cyrillic "ё" to "е", so that
// stop words and near-duplicate shingles match however the text spells them. Other code points
// are returned unchanged.
inline char32_t fold_case(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 0x20 : cp;
  return detail::fold_non_ascii(cp);
}

}  // namespace gradbox::data::utf8
