#include "data/utf8.h"

#include <algorithm>
#include <array>

namespace gradbox::data::utf8 {
namespace {

// Note [special characters]
// A code point is "special" when it is not a letter, not a digit, not whitespace and not
// ordinary prose punctuation. Prose punctuation is ASCII ! " ' ( ) , - . : ; ? and its
// typographic relatives: Unicode dashes, quotes, the ellipsis, guillemets, inverted ! and ?,
// the middle dot, the numero sign, CJK and fullwidth punctuation. So special covers ASCII
// # $ % & * + / < = > @ [ \ ] ^ _ ` { | } ~, currency, math, arrows, box drawing, emoji and
// other pictographs, control and invisible format characters, private-use code points and
// every byte of invalid UTF-8 (decoded as U+FFFD). Markup, code, tables and mojibake score
// high; prose in any script scores low.

struct Range {
  char32_t lo;
  char32_t hi;
  CharClass cls;
  Script script;
};

constexpr CharClass L = CharClass::letter;
constexpr CharClass D = CharClass::digit;
constexpr CharClass S = CharClass::space;
constexpr CharClass P = CharClass::punct;
constexpr CharClass X = CharClass::special;
constexpr Script kNone = Script::none;
constexpr Script kLatin = Script::latin;
constexpr Script kGreek = Script::greek;
constexpr Script kCyr = Script::cyrillic;
constexpr Script kCjk = Script::cjk;
constexpr Script kOther = Script::other;

// Sorted, non-overlapping ranges above ASCII. Gaps are special. Coarse on purpose for scripts
// the filters do not select on ("letter, other"); exact for Latin, Greek, Cyrillic and CJK.
constexpr Range kRanges[] = {
    {0x0080, 0x009F, X, kNone},    // C1 controls
    {0x00A0, 0x00A0, S, kNone},    // no-break space
    {0x00A1, 0x00A1, P, kNone},    // inverted exclamation mark
    {0x00A2, 0x00A9, X, kNone},    // currency, section, copyright
    {0x00AA, 0x00AA, L, kLatin},   // feminine ordinal
    {0x00AB, 0x00AB, P, kNone},    // left guillemet
    {0x00AC, 0x00B6, X, kNone},    // not, soft hyphen, degree, plus-minus, micro, pilcrow
    {0x00B7, 0x00B7, P, kNone},    // middle dot
    {0x00B8, 0x00B9, X, kNone},
    {0x00BA, 0x00BA, L, kLatin},   // masculine ordinal
    {0x00BB, 0x00BB, P, kNone},    // right guillemet
    {0x00BC, 0x00BE, X, kNone},    // vulgar fractions
    {0x00BF, 0x00BF, P, kNone},    // inverted question mark
    {0x00C0, 0x00D6, L, kLatin},
    {0x00D7, 0x00D7, X, kNone},    // multiplication sign
    {0x00D8, 0x00F6, L, kLatin},
    {0x00F7, 0x00F7, X, kNone},    // division sign
    {0x00F8, 0x02AF, L, kLatin},   // Latin-1 letters, Extended-A/B, IPA
    {0x02B0, 0x02FF, P, kNone},    // spacing modifier letters (ʼ ˈ ˌ ...)
    {0x0300, 0x036F, L, kNone},    // combining diacritics: part of the letter before them
    {0x0370, 0x0373, L, kGreek},
    {0x0374, 0x0375, P, kNone},
    {0x0376, 0x0377, L, kGreek},
    {0x037A, 0x037D, L, kGreek},
    {0x037E, 0x037E, P, kNone},    // Greek question mark
    {0x037F, 0x037F, L, kGreek},
    {0x0384, 0x0385, X, kNone},    // spacing tonos
    {0x0386, 0x0386, L, kGreek},
    {0x0387, 0x0387, P, kNone},    // Greek ano teleia
    {0x0388, 0x03FF, L, kGreek},
    {0x0400, 0x0481, L, kCyr},
    {0x0482, 0x0482, X, kNone},    // Cyrillic thousands sign
    {0x0483, 0x0489, L, kNone},    // Cyrillic combining marks
    {0x048A, 0x052F, L, kCyr},
    {0x0530, 0x0588, L, kOther},   // Armenian
    {0x0589, 0x058A, P, kNone},
    {0x058B, 0x060B, L, kOther},   // Hebrew, start of Arabic
    {0x060C, 0x060D, P, kNone},    // Arabic comma
    {0x060E, 0x061A, L, kOther},
    {0x061B, 0x061B, P, kNone},    // Arabic semicolon
    {0x061C, 0x061E, L, kOther},
    {0x061F, 0x061F, P, kNone},    // Arabic question mark
    {0x0620, 0x065F, L, kOther},
    {0x0660, 0x0669, D, kNone},    // Arabic-Indic digits
    {0x066A, 0x066D, P, kNone},
    {0x066E, 0x06EF, L, kOther},
    {0x06F0, 0x06F9, D, kNone},    // Extended Arabic-Indic digits
    {0x06FA, 0x0963, L, kOther},
    {0x0964, 0x0965, P, kNone},    // danda
    {0x0966, 0x096F, D, kNone},    // Devanagari digits
    {0x0970, 0x1CFF, L, kOther},   // Indic, SE Asian, Georgian, Hangul Jamo, Ethiopic, ...
    {0x1D00, 0x1DBF, L, kLatin},   // phonetic extensions
    {0x1DC0, 0x1DFF, L, kNone},    // combining diacritics supplement
    {0x1E00, 0x1EFF, L, kLatin},   // Latin Extended Additional (Vietnamese, Welsh, ...)
    {0x1F00, 0x1FFF, L, kGreek},   // Greek Extended
    {0x2000, 0x200A, S, kNone},    // en/em/thin spaces
    {0x200B, 0x200F, X, kNone},    // zero-width space/joiners, direction marks
    {0x2010, 0x2027, P, kNone},    // dashes, quotes, bullet, ellipsis
    {0x2028, 0x2029, S, kNone},    // line/paragraph separator
    {0x202A, 0x202E, X, kNone},    // bidi embedding controls
    {0x202F, 0x202F, S, kNone},    // narrow no-break space
    {0x2030, 0x205E, P, kNone},    // per mille, primes, single guillemets, ‼ ⁇ ...
    {0x205F, 0x205F, S, kNone},
    {0x2060, 0x2115, X, kNone},    // invisible operators, super/subscripts, currency, ℃
    {0x2116, 0x2116, P, kNone},    // numero sign, common in Russian prose
    {0x2117, 0x2BFF, X, kNone},    // letterlike, arrows, math, box drawing, shapes, dingbats
    {0x2C00, 0x2C5F, L, kOther},   // Glagolitic
    {0x2C60, 0x2C7F, L, kLatin},   // Latin Extended-C
    {0x2C80, 0x2DDF, L, kOther},   // Coptic, Georgian supplement, Tifinagh, Ethiopic ext
    {0x2DE0, 0x2DFF, L, kCyr},     // Cyrillic Extended-A
    {0x2E00, 0x2E7F, P, kNone},    // supplemental punctuation
    {0x2E80, 0x2FDF, L, kCjk},     // CJK and Kangxi radicals
    {0x3000, 0x3000, S, kNone},    // ideographic space
    {0x3001, 0x3003, P, kNone},    // 、。〃
    {0x3005, 0x3007, L, kCjk},     // 々〆〇
    {0x3008, 0x3011, P, kNone},    // CJK brackets
    {0x3014, 0x301F, P, kNone},
    {0x3021, 0x302F, L, kCjk},
    {0x3030, 0x3030, P, kNone},
    {0x3031, 0x303C, L, kCjk},
    {0x3040, 0x30FA, L, kCjk},     // Hiragana, Katakana
    {0x30FB, 0x30FB, P, kNone},    // katakana middle dot
    {0x30FC, 0x31FF, L, kCjk},     // Katakana, Bopomofo, Hangul compatibility Jamo, ...
    {0x3400, 0x4DBF, L, kCjk},     // CJK Extension A
    {0x4E00, 0x9FFF, L, kCjk},     // CJK Unified Ideographs
    {0xA000, 0xA63F, L, kOther},   // Yi, Lisu, Vai
    {0xA640, 0xA69F, L, kCyr},     // Cyrillic Extended-B
    {0xA6A0, 0xA6FF, L, kOther},
    {0xA700, 0xA71F, P, kNone},    // modifier tone letters
    {0xA720, 0xA7FF, L, kLatin},   // Latin Extended-D
    {0xA800, 0xAB2F, L, kOther},
    {0xAB30, 0xAB6F, L, kLatin},   // Latin Extended-E
    {0xAB70, 0xABFF, L, kOther},
    {0xAC00, 0xD7FF, L, kCjk},     // Hangul syllables and Jamo
    {0xF900, 0xFAFF, L, kCjk},     // CJK compatibility ideographs
    {0xFB00, 0xFB06, L, kLatin},   // ﬀ ﬁ ﬂ ligatures
    {0xFB07, 0xFDFF, L, kOther},   // Armenian, Hebrew, Arabic presentation forms
    {0xFE10, 0xFE19, P, kNone},    // vertical forms
    {0xFE30, 0xFE6F, P, kNone},    // CJK compatibility and small forms
    {0xFE70, 0xFEFE, L, kOther},   // Arabic presentation forms-B
    // FF01..FF5E (fullwidth ASCII) is mapped onto ASCII in classify().
    {0xFF5F, 0xFF65, P, kNone},    // fullwidth brackets, halfwidth CJK punctuation
    {0xFF66, 0xFFDC, L, kCjk},     // halfwidth Katakana and Hangul
    {0x10000, 0x1CFFF, L, kOther}, // historic scripts
    {0x1E000, 0x1EFFF, L, kOther}, // Adlam, Glagolitic supplement, ...
    {0x20000, 0x3FFFF, L, kCjk},   // CJK Extensions B..H
};

constexpr bool ranges_sorted() {
  for (size_t i = 0; i < std::size(kRanges); ++i) {
    if (kRanges[i].lo > kRanges[i].hi) return false;
    if (i > 0 && kRanges[i - 1].hi >= kRanges[i].lo) return false;
  }
  return true;
}
static_assert(ranges_sorted(), "kRanges must be sorted and non-overlapping");

constexpr std::array<CodePointInfo, 128> make_ascii_table() {
  std::array<CodePointInfo, 128> table{};
  for (int c = 0; c < 128; ++c) {
    CodePointInfo info{X, kNone};
    if (c == ' ' || (c >= '\t' && c <= '\r')) info = {S, kNone};
    else if (c >= '0' && c <= '9') info = {D, kNone};
    else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) info = {L, kLatin};
    else if (c == '!' || c == '"' || c == '\'' || c == '(' || c == ')' || c == ',' || c == '-' ||
             c == '.' || c == ':' || c == ';' || c == '?')
      info = {P, kNone};
    table[static_cast<size_t>(c)] = info;
  }
  return table;
}
}  // namespace

namespace detail {

const std::array<CodePointInfo, 128> kAsciiInfo = make_ascii_table();

char32_t decode_multibyte(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char b0 = p[pos];
  size_t len;
  char32_t cp;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++pos;
    return kReplacement;
  }
  if (len > text.size() - pos) {
    ++pos;
    return kReplacement;
  }
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = p[pos + k];
    if ((b & 0xC0) != 0x80) {
      ++pos;
      return kReplacement;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++pos;
    return kReplacement;
  }
  pos += len;
  return cp;
}

}  // namespace detail

int64_t count_code_points(std::string_view text) {
  int64_t count = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
    } else {
      decode(text, pos);
    }
    ++count;
  }
  return count;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace detail {

CodePointInfo classify_non_ascii(char32_t cp) {
  if (cp >= 0xFF01 && cp <= 0xFF5E) return kAsciiInfo[cp - 0xFEE0];  // fullwidth ASCII
  const auto* end = std::end(kRanges);
  const auto* it = std::upper_bound(std::begin(kRanges), end, cp,
                                    [](char32_t c, const Range& r) { return c < r.lo; });
  if (it == std::begin(kRanges)) return {X, kNone};
  --it;
  if (cp > it->hi) return {X, kNone};
  return {it->cls, it->script};
}

char32_t fold_non_ascii(char32_t cp) {
  if (cp < 0x100) return (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) ? cp + 0x20 : cp;
  if (cp < 0x180) {  // Latin Extended-A: mostly upper/lower pairs
    if (cp == 0x178) return 0xFF;  // Ÿ
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177))
      return (cp % 2 == 0) ? cp + 1 : cp;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E))
      return (cp % 2 == 1) ? cp + 1 : cp;
    return cp;
  }
  if (cp >= 0x370 && cp < 0x400) {  // Greek
    if ((cp >= 0x391 && cp <= 0x3A1) || (cp >= 0x3A3 && cp <= 0x3AB)) return cp + 0x20;
    if (cp == 0x386) return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A) return cp + 0x25;
    if (cp == 0x38C) return 0x3CC;
    if (cp == 0x38E || cp == 0x38F) return cp + 0x3F;
    if (cp == 0x3C2) return 0x3C3;  // final sigma
    return cp;
  }
  if (cp >= 0x400 && cp < 0x530) {  // Cyrillic
    if (cp == 0x401 || cp == 0x451) return 0x435;  // Ё, ё -> е
    if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
    if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
    if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) ||
        (cp >= 0x4D0 && cp <= 0x52F))
      return (cp % 2 == 0) ? cp + 1 : cp;
    if (cp == 0x4C0) return 0x4CF;
    if (cp >= 0x4C1 && cp <= 0x4CE) return (cp % 2 == 1) ? cp + 1 : cp;
    return cp;
  }
  if (cp >= 0x1E00 && cp <= 0x1EFF) {  // Latin Extended Additional
    if ((cp <= 0x1E95) || (cp >= 0x1EA0)) return (cp % 2 == 0) ? cp + 1 : cp;
    return cp;
  }
  return cp;
}

}  // namespace detail

}  // namespace gradbox::data::utf8
