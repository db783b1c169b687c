#include "data/cleaning_report.h"

#include <cstdio>

#include "common/error.h"

namespace gradbox::data {
namespace {

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kept: return "kept";
    case Verdict::malformed: return "malformed";
    case Verdict::too_long: return "too_long";
    case Verdict::too_short: return "too_short";
    case Verdict::few_stopwords: return "few_stopwords";
    case Verdict::low_letter_ratio: return "low_letter_ratio";
    case Verdict::high_special_ratio: return "high_special_ratio";
    case Verdict::wrong_script: return "wrong_script";
    case Verdict::near_duplicate: return "near_duplicate";
  }
  GB_CHECK(false, "unknown verdict ", static_cast<int>(verdict));
}

int64_t CleaningReport::total_docs() const {
  int64_t total = 0;
  for (int64_t n : docs) total += n;
  return total;
}

int64_t CleaningReport::total_bytes() const {
  int64_t total = 0;
  for (int64_t n : bytes) total += n;
  return total;
}

std::string CleaningReport::summary() const {
  std::string text = str("read ", total_docs(), " docs (", megabytes(total_bytes()), "), kept ",
                         docs_of(Verdict::kept), " (", megabytes(bytes_of(Verdict::kept)), ")");
  std::string dropped;
  for (size_t i = 1; i < kVerdictCount; ++i) {
    if (docs[i] == 0) continue;
    dropped += str(dropped.empty() ? "" : ", ", verdict_name(static_cast<Verdict>(i)), " ",
                   docs[i], " (", megabytes(bytes[i]), ")");
  }
  if (!dropped.empty()) text += "; dropped: " + dropped;
  return text;
}

}  // namespace gradbox::data
