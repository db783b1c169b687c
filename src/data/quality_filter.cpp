#include "data/quality_filter.h"

#include "common/error.h"
#include "data/utf8.h"

namespace gradbox::data {

ScriptFilter parse_script_filter(std::string_view name) {
  if (name == "any") return ScriptFilter::any;
  if (name == "latin") return ScriptFilter::latin;
  if (name == "cyrillic") return ScriptFilter::cyrillic;
  throw InputError(str("--script: unknown script '", name, "' (any, latin, cyrillic)"));
}

std::string_view script_filter_name(ScriptFilter script) {
  switch (script) {
    case ScriptFilter::any: return "any";
    case ScriptFilter::latin: return "latin";
    case ScriptFilter::cyrillic: return "cyrillic";
  }
  GB_CHECK(false, "unknown script filter ", static_cast<int>(script));
}

TextStats compute_text_stats(std::string_view text) {
  TextStats s;
  size_t pos = 0;
  while (pos < text.size()) {
    const utf8::CodePointInfo info = utf8::classify(utf8::decode(text, pos));
    ++s.chars;
    switch (info.cls) {
      case utf8::CharClass::letter:
        ++s.letters;
        if (info.script != utf8::Script::none) ++s.scripted_letters;
        if (info.script == utf8::Script::latin) ++s.latin;
        if (info.script == utf8::Script::cyrillic) ++s.cyrillic;
        break;
      case utf8::CharClass::digit: ++s.digits; break;
      case utf8::CharClass::space: ++s.spaces; break;
      case utf8::CharClass::special: ++s.special; break;
      case utf8::CharClass::punct: break;
    }
  }
  return s;
}

QualityFilter::QualityFilter(QualityOptions options, StopWords stop_words)
    : options_(options), stop_words_(std::move(stop_words)) {
  GB_CHECK(options_.min_stopwords == 0 || stop_words_.size() > 0,
           "stop-word check enabled with an empty list");
}

Verdict QualityFilter::check(std::string_view text) const {
  // Length first: it only counts code points.
  const int64_t chars = utf8::count_code_points(text);
  if (chars == 0 || chars < options_.min_chars) return Verdict::too_short;
  if (chars > options_.max_chars) return Verdict::too_long;

  // The cheap language check: usually decided within the first dozen words.
  if (options_.min_stopwords > 0 &&
      stop_words_.count_in(text, options_.min_stopwords) < options_.min_stopwords)
    return Verdict::few_stopwords;

  const TextStats s = compute_text_stats(text);
  const double n = static_cast<double>(s.chars);
  if (static_cast<double>(s.letters) < options_.min_letter_ratio * n)
    return Verdict::low_letter_ratio;
  if (static_cast<double>(s.special) > options_.max_special_ratio * n)
    return Verdict::high_special_ratio;
  if (options_.script != ScriptFilter::any) {
    const int64_t in_script =
        options_.script == ScriptFilter::latin ? s.latin : s.cyrillic;
    if (s.scripted_letters == 0 ||
        static_cast<double>(in_script) <
            options_.min_script_ratio * static_cast<double>(s.scripted_letters))
      return Verdict::wrong_script;
  }
  return Verdict::kept;
}

}  // namespace gradbox::data
