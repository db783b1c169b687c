#pragma once
// The per-document quality checks of the streaming filter, cheapest first: length in
// characters, then the stop-word check, then one decoding pass for the letter ratio, the
// special-character ratio and the script share (our stand-in for a language identifier).
// Stateless: near-duplicates are the SimHash index's job.
#include <cstdint>
#include <string>
#include <string_view>

#include "data/cleaning_report.h"
#include "data/stopwords.h"

namespace gradbox::data {

// Which writing system a kept document must be mostly written in.
enum class ScriptFilter : uint8_t { any, latin, cyrillic };
ScriptFilter parse_script_filter(std::string_view name);  // InputError naming --script
std::string_view script_filter_name(ScriptFilter script);

struct QualityOptions {
  int64_t min_chars = 50;            // code points, after trimming surrounding whitespace
  int64_t max_chars = 5000;
  int32_t min_stopwords = 2;         // 0 disables the stop-word check
  double min_letter_ratio = 0.4;     // letters / code points
  double max_special_ratio = 0.25;   // special / code points; see Note [special characters]
  ScriptFilter script = ScriptFilter::any;
  double min_script_ratio = 0.6;     // letters of the script / letters that have a script
};

// Counts over one document, for the checks and for tests.
struct TextStats {
  int64_t chars = 0;
  int64_t letters = 0;
  int64_t digits = 0;
  int64_t spaces = 0;
  int64_t special = 0;
  int64_t latin = 0;
  int64_t cyrillic = 0;
  int64_t scripted_letters = 0;  // letters with a script (combining marks have none)
};
TextStats compute_text_stats(std::string_view text);

class QualityFilter {
 public:
  QualityFilter(QualityOptions options, StopWords stop_words);
  // Verdict::kept, or the first check the (already trimmed) text fails.
  Verdict check(std::string_view text) const;
  const QualityOptions& options() const { return options_; }

 private:
  QualityOptions options_;
  StopWords stop_words_;
};

}  // namespace gradbox::data
