#pragma once
// What the cleaning stage did with each document, and the per-reason tally that goes into the
// log and report.json.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gradbox::data {

// In the order the checks run; a document gets the first one it fails.
enum class Verdict : uint8_t {
  kept,
  malformed,           // jsonl line that is not an object with a string "text"
  too_long,            // over --max-chars, or over the reader's --max-doc-bytes cap
  too_short,           // under --min-chars (also empty documents)
  few_stopwords,       // fewer than --min-stopwords stop words
  low_letter_ratio,    // letters / characters < --min-letter-ratio
  high_special_ratio,  // special characters / characters > --max-special-ratio
  wrong_script,        // letters in --script / letters < --min-script-ratio
  near_duplicate,      // SimHash within --simhash-threshold of an earlier kept document
};
inline constexpr size_t kVerdictCount = 9;

std::string_view verdict_name(Verdict verdict);

struct CleaningReport {
  std::array<int64_t, kVerdictCount> docs{};
  std::array<int64_t, kVerdictCount> bytes{};  // input bytes of those documents

  void add(Verdict verdict, int64_t doc_bytes) {
    docs[static_cast<size_t>(verdict)] += 1;
    bytes[static_cast<size_t>(verdict)] += doc_bytes;
  }
  int64_t docs_of(Verdict v) const { return docs[static_cast<size_t>(v)]; }
  int64_t bytes_of(Verdict v) const { return bytes[static_cast<size_t>(v)]; }
  int64_t total_docs() const;
  int64_t total_bytes() const;
  // "read 123 docs (4.5 MB), kept 100 (4.0 MB); dropped: too_short 20 (0.1 MB), ..."
  std::string summary() const;
};

}  // namespace gradbox::data
