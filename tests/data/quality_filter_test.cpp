#include "data/quality_filter.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "data/stopwords.h"
#include "data/text_cleaner.h"
#include "test_util.h"

namespace gradbox::data {
namespace {

const char* kEnglish =
    "The old stone bridge crossed the river where the village children played in summer.";
const char* kRussian =
    "Старый каменный мост пересекал реку, где летом играли деревенские дети и их собаки.";

QualityFilter make_filter(QualityOptions options = {}) {
  return QualityFilter(options, StopWords::builtin());
}

TEST(QualityFilter, KeepsOrdinaryProseInEitherLanguage) {
  const QualityFilter filter = make_filter();
  EXPECT_EQ(filter.check(kEnglish), Verdict::kept);
  EXPECT_EQ(filter.check(kRussian), Verdict::kept);
}

TEST(QualityFilter, LengthBoundsCountCodePointsNotBytes) {
  QualityOptions options;
  options.min_chars = 10;
  options.max_chars = 12;
  options.min_stopwords = 0;
  const QualityFilter filter = make_filter(options);
  EXPECT_EQ(filter.check("ЖЖЖЖ ЖЖЖЖ"), Verdict::too_short);    // 9 chars, 17 bytes
  EXPECT_EQ(filter.check("ЖЖЖЖ ЖЖЖЖЖ"), Verdict::kept);        // 10 chars
  EXPECT_EQ(filter.check("ЖЖЖЖ ЖЖЖЖЖЖЖ"), Verdict::kept);      // 12 chars
  EXPECT_EQ(filter.check("ЖЖЖЖ ЖЖЖЖЖЖЖЖ"), Verdict::too_long); // 13 chars
  EXPECT_EQ(filter.check(""), Verdict::too_short);
}

TEST(QualityFilter, StopWordCheckCountsOccurrencesAndCanBeTurnedOff) {
  QualityOptions options;
  options.min_chars = 1;
  options.min_stopwords = 2;
  const QualityFilter filter = make_filter(options);
  EXPECT_EQ(filter.check("Buy cheap watches online now"), Verdict::few_stopwords);  // "now" only
  EXPECT_EQ(filter.check("Buy THE cheap watches and the rest"), Verdict::kept);     // case folded
  EXPECT_EQ(filter.check("Купить дешевые часы онлайн"), Verdict::few_stopwords);
  EXPECT_EQ(filter.check("Купить часы и ЕЩЁ что-нибудь"), Verdict::kept);  // и, что (ё folded)
  options.min_stopwords = 0;
  EXPECT_EQ(make_filter(options).check("Buy cheap watches online now"), Verdict::kept);
}

TEST(QualityFilter, StopWordFileReplacesBuiltins) {
  testing::ScratchDir dir;
  testing::write_text(dir / "sw.txt", "# my list\nwatches\nONLINE\n\n");
  QualityOptions options;
  options.min_chars = 1;
  const QualityFilter filter(options, StopWords::load(dir / "sw.txt"));
  EXPECT_EQ(filter.check("Buy cheap watches online"), Verdict::kept);
  EXPECT_EQ(filter.check("the river and the sea"), Verdict::few_stopwords);
  EXPECT_THROW(StopWords::load(dir / "missing.txt"), InputError);
}

TEST(QualityFilter, LetterRatioThreshold) {
  QualityOptions options;
  options.min_chars = 1;
  options.min_stopwords = 0;
  options.max_special_ratio = 1.0;
  options.min_letter_ratio = 0.5;
  const QualityFilter filter = make_filter(options);
  EXPECT_EQ(filter.check("abcde12345"), Verdict::kept);              // exactly 0.5
  EXPECT_EQ(filter.check("abcd123456"), Verdict::low_letter_ratio);  // 0.4
  EXPECT_EQ(filter.check("12 34, 56. 78 - 90"), Verdict::low_letter_ratio);
}

TEST(QualityFilter, SpecialRatioThreshold) {
  QualityOptions options;
  options.min_chars = 1;
  options.min_stopwords = 0;
  options.min_letter_ratio = 0;
  options.max_special_ratio = 0.25;
  const QualityFilter filter = make_filter(options);
  EXPECT_EQ(filter.check("abc#"), Verdict::kept);                       // 0.25
  EXPECT_EQ(filter.check("ab#$"), Verdict::high_special_ratio);         // 0.5
  EXPECT_EQ(filter.check("\"Hello,\" she said - (quietly)!"), Verdict::kept);  // prose punctuation
  EXPECT_EQ(filter.check("<div>{x}</div>"), Verdict::high_special_ratio);
  EXPECT_EQ(filter.check("ab\xFF\xFE"), Verdict::high_special_ratio);   // invalid UTF-8
}

TEST(QualityFilter, ScriptCheck) {
  QualityOptions options;
  options.min_chars = 1;
  options.min_stopwords = 0;
  options.script = ScriptFilter::cyrillic;
  options.min_script_ratio = 0.6;
  EXPECT_EQ(make_filter(options).check(kRussian), Verdict::kept);
  EXPECT_EQ(make_filter(options).check(kEnglish), Verdict::wrong_script);
  // 6 Cyrillic letters of 10: exactly at the threshold.
  EXPECT_EQ(make_filter(options).check("жжжжжж abcd"), Verdict::kept);
  EXPECT_EQ(make_filter(options).check("жжжжж abcde"), Verdict::wrong_script);
  options.script = ScriptFilter::latin;
  EXPECT_EQ(make_filter(options).check(kEnglish), Verdict::kept);
  EXPECT_EQ(make_filter(options).check(kRussian), Verdict::wrong_script);
  EXPECT_EQ(make_filter(options).check("Ça coûte très cher, à mon avis."), Verdict::kept);
  options.script = ScriptFilter::any;
  EXPECT_EQ(make_filter(options).check("中文文本没有停用词检查"), Verdict::kept);
  EXPECT_THROW(parse_script_filter("klingon"), InputError);
}

TEST(QualityFilter, CheapChecksRunFirst) {
  // Too short and full of symbols: length decides.
  EXPECT_EQ(make_filter().check("#$%"), Verdict::too_short);
  // Long enough, no stop words, and symbols: the stop-word check decides.
  EXPECT_EQ(make_filter().check(std::string(60, '#')), Verdict::few_stopwords);
}

TEST(TextCleaner, CountsVerdictsAndBytesAndTrims) {
  CleaningOptions options;
  TextCleaner cleaner(options, StopWords::builtin());
  Document doc;
  doc.text = std::string("\n\n  ") + kEnglish + "  \n";
  doc.bytes = static_cast<int64_t>(doc.text.size());
  EXPECT_EQ(cleaner.check(doc), Verdict::kept);
  EXPECT_EQ(cleaner.check(doc), Verdict::near_duplicate);  // the same text again
  doc.status = DocumentStatus::too_long;
  doc.bytes = 5'000'000;
  EXPECT_EQ(cleaner.check(doc), Verdict::too_long);
  doc.status = DocumentStatus::malformed;
  doc.bytes = 7;
  EXPECT_EQ(cleaner.check(doc), Verdict::malformed);
  const CleaningReport& r = cleaner.report();
  EXPECT_EQ(r.total_docs(), 4);
  EXPECT_EQ(r.docs_of(Verdict::kept), 1);
  EXPECT_EQ(r.docs_of(Verdict::near_duplicate), 1);
  EXPECT_EQ(r.bytes_of(Verdict::too_long), 5'000'000);
  EXPECT_EQ(r.bytes_of(Verdict::malformed), 7);
  EXPECT_NE(r.summary().find("near_duplicate 1"), std::string::npos) << r.summary();
  EXPECT_EQ(trim_text(" \t\r\n x y \n"), "x y");
}

}  // namespace
}  // namespace gradbox::data
