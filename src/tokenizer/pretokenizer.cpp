#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"
#include "tokenizer/unicode_extras.h"

namespace gradbox::tokenizer {
namespace {

// encoder.py's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with two changes that make PCRE2 match what Python's `regex` module (used by encoder.py and
// Hugging Face) matches: \s spelled out as Unicode's White_Space property, which
// [\t\n\x0B\f\r\x{85}\p{Z}] is exactly (PCRE2's \s misses U+0085), and \p{L}, \p{N} widened
// by what Unicode added after PCRE2's version (unicode_extras.h).
std::string gpt2_pattern() {
  const std::string ws = R"(\t\n\x0B\f\r\x{85}\p{Z})";
  const std::string letters = R"(\p{L})" + std::string(kLettersAfterUnicode14);
  const std::string numbers = R"(\p{N})" + std::string(kNumbersAfterUnicode14);
  return "'s|'t|'re|'ve|'m|'ll|'d| ?[" + letters + "]+| ?[" + numbers + "]+| ?[^" + ws + letters +
         numbers + "]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Note [ASCII fast path]
// For ASCII the pattern's classes are plain: letters a-zA-Z, digits 0-9, whitespace
// "\t\n\v\f\r ", everything else "other" (\x1C-\x1F too: they are not White_Space). The
// alternatives in order, at position i:
//   's 't 're 've 'm 'll 'd               fixed strings, whatever follows
//   " ?" + a run of letters / digits / others   the space joins the run that follows it
//   whitespace run followed by the end: all of it; followed by a non-space: all but the last
//   character (which then joins the next word), unless the run is a single character.
// The extent of a run, or the whitespace backtrack, depends on the first character after it;
// when that is not ASCII (a letter? NEL?) the fast path gives up and PCRE2 matches from i.
enum class AsciiClass : uint8_t { letter, digit, space, other, non_ascii };

constexpr std::array<AsciiClass, 256> make_ascii_classes() {
  std::array<AsciiClass, 256> table{};
  for (int c = 0; c < 256; ++c) {
    if (c >= 0x80)
      table[c] = AsciiClass::non_ascii;
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      table[c] = AsciiClass::letter;
    else if (c >= '0' && c <= '9')
      table[c] = AsciiClass::digit;
    else if (c == ' ' || (c >= '\t' && c <= '\r'))
      table[c] = AsciiClass::space;
    else
      table[c] = AsciiClass::other;
  }
  return table;
}
constexpr std::array<AsciiClass, 256> kAsciiClass = make_ascii_classes();

// End of the match at text[i], or 0 when ASCII alone cannot decide it.
size_t ascii_match_end(std::string_view text, size_t i) {
  const size_t n = text.size();
  auto cls = [&](size_t k) { return kAsciiClass[static_cast<unsigned char>(text[k])]; };
  const char c = text[i];
  if (c == '\'' && i + 1 < n) {
    const char c1 = text[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < n) {
      const char c2 = text[i + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return i + 3;
    }
  }
  size_t run_begin = i;
  AsciiClass run = cls(i);
  if (run == AsciiClass::non_ascii) return 0;
  if (c == ' ' && i + 1 < n && cls(i + 1) != AsciiClass::space) {
    run_begin = i + 1;  // " ?": the space joins the run that follows
    run = cls(i + 1);
    if (run == AsciiClass::non_ascii) return 0;
  }
  size_t k = run_begin + 1;
  while (k < n && cls(k) == run) ++k;
  if (k < n && cls(k) == AsciiClass::non_ascii) return 0;  // the run may go on
  if (run != AsciiClass::space || k == n) return k;
  // \s+(?!\S): a run followed by a non-space gives its last character to the next word.
  return k - i >= 2 ? k - 1 : k;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

Gpt2Pretokenizer::Gpt2Pretokenizer(Engine engine) : engine_(engine) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 in the subject is skipped over instead of an error.
  const std::string pattern = gpt2_pattern();
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  GB_CHECK(code_ != nullptr, "GPT-2 pattern does not compile at ", offset, ": ",
           pcre2_message(error));
  // Without JIT (a PCRE2 built without it) matching is slower but gives the same words.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Gpt2Pretokenizer::~Gpt2Pretokenizer() { pcre2_code_free(code_); }

void Gpt2Pretokenizer::split(std::string_view text,
                             const std::function<void(std::string_view)>& emit) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md;  // made at the first PCRE2 match
  const PCRE2_SIZE* ovector = nullptr;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    if (engine_ == Engine::ascii_fast_path) {
      if (const size_t end = ascii_match_end(text, pos); end != 0) {
        emit(text.substr(pos, end - pos));
        pos = end;
        continue;
      }
    }
    if (!md) {
      md.reset(pcre2_match_data_create_from_pattern(code_, nullptr));
      GB_CHECK(md != nullptr, "out of memory for PCRE2 match data");
      ovector = pcre2_get_ovector_pointer(md.get());
    }
    const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, 0, md.get(), nullptr)
                        : pcre2_match(code_, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      emit(text.substr(pos));  // only invalid bytes are left
      return;
    }
    GB_CHECK(rc > 0, "PCRE2 match failed at byte ", pos, " of ", text.size(), ": ",
             pcre2_message(rc));
    const size_t begin = ovector[0], end = ovector[1];
    GB_CHECK(end > begin && begin >= pos, "empty or backward match at ", begin);
    if (begin > pos) emit(text.substr(pos, begin - pos));  // invalid UTF-8 run
    emit(text.substr(begin, end - begin));
    pos = end;
  }
}

}  // namespace gradbox::tokenizer
