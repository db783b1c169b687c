#pragma once
// The streaming filter: every document read goes through check() once and gets a verdict;
// kept documents are remembered (as SimHash fingerprints) so later near-duplicates of them are
// dropped. Keeps the per-reason report.
#include <cstdint>
#include <optional>
#include <string_view>

#include "data/cleaning_report.h"
#include "data/document_reader.h"
#include "data/quality_filter.h"
#include "data/simhash.h"

namespace gradbox::data {

struct CleaningOptions {
  QualityOptions quality;
  int32_t simhash_threshold = 3;          // bits; see Note [banded SimHash index]
  int32_t simhash_shingle_words = kDefaultShingleWords;
  int64_t simhash_capacity = 4'000'000;   // fingerprints kept (FIFO); 0 disables dedup
};

class TextCleaner {
 public:
  TextCleaner(const CleaningOptions& options, StopWords stop_words);

  // Verdict for one document as read (status from the reader, then the quality checks on the
  // trimmed text, then the near-duplicate check). Records it in the report; a kept document's
  // fingerprint enters the index.
  Verdict check(const Document& doc);

  const CleaningReport& report() const { return report_; }
  const std::optional<SimHashIndex>& index() const { return index_; }

 private:
  QualityFilter quality_;
  int32_t shingle_words_;
  std::optional<SimHashIndex> index_;  // empty when dedup is off
  CleaningReport report_;
};

}  // namespace gradbox::data
