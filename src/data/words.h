#pragma once
// Word splitting shared by the stop-word check and the SimHash shingles: a word is a maximal
// run of letters and digits (utf8::classify), case-folded with utf8::fold_case. Apostrophes
// and hyphens split words ("don't" -> "don", "t"), which the stop-word lists account for.
#include <string>
#include <string_view>

#include "data/utf8.h"

namespace gradbox::data {

// Calls fn(std::string_view word) for each folded word in order; stops early as soon as fn
// returns false. The view is only valid during the call.
template <class Fn>
void for_each_word(std::string_view text, Fn&& fn) {
  std::string word;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = utf8::decode(text, pos);
    const utf8::CharClass cls = utf8::classify(cp).cls;
    if (cls == utf8::CharClass::letter || cls == utf8::CharClass::digit) {
      const char32_t folded = utf8::fold_case(cp);
      if (folded < 0x80) {
        word.push_back(static_cast<char>(folded));
      } else {
        utf8::append(word, folded);
      }
    } else if (!word.empty()) {
      if (!fn(std::string_view(word))) return;
      word.clear();
    }
  }
  if (!word.empty()) fn(std::string_view(word));
}

// The letters and digits of `word`, folded the same way (for stop-word lists).
std::string fold_word(std::string_view word);

}  // namespace gradbox::data
