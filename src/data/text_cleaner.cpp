#include "data/text_cleaner.h"

namespace gradbox::data {

TextCleaner::TextCleaner(const CleaningOptions& options, StopWords stop_words)
    : quality_(options.quality, std::move(stop_words)),
      shingle_words_(options.simhash_shingle_words) {
  if (options.simhash_capacity > 0)
    index_.emplace(options.simhash_threshold, options.simhash_capacity);
}

Verdict TextCleaner::check(const Document& doc) {
  Verdict verdict = Verdict::kept;
  if (doc.status == DocumentStatus::malformed) {
    verdict = Verdict::malformed;
  } else if (doc.status == DocumentStatus::too_long) {
    verdict = Verdict::too_long;
  } else {
    const std::string_view text = trim_text(doc.text);
    verdict = quality_.check(text);
    if (verdict == Verdict::kept && index_) {
      const uint64_t fp = simhash64(text, shingle_words_);
      if (index_->contains_near(fp)) {
        verdict = Verdict::near_duplicate;
      } else {
        index_->insert(fp);
      }
    }
  }
  report_.add(verdict, doc.bytes);
  return verdict;
}

}  // namespace gradbox::data
