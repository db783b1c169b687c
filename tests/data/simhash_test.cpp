#include "data/simhash.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "data/stopwords.h"
#include "data/text_cleaner.h"
#include "test_util.h"

namespace gradbox::data {
namespace {

namespace fs = std::filesystem;

std::string replace_word(std::string text, const std::string& from, const std::string& to,
                         size_t after) {
  const size_t pos = text.find(" " + from + " ", after);
  EXPECT_NE(pos, std::string::npos);
  return text.replace(pos + 1, from.size(), to);
}

TEST(SimHash, OneChangedWordIsANearDuplicate) {
  // ~800 words, about the longest document the default --max-chars keeps.
  const std::string doc = testing::make_prose(800, 1);
  const std::string edited = replace_word(doc, "river", "canal", doc.size() / 2);
  ASSERT_NE(doc, edited);
  EXPECT_LE(hamming_distance(simhash64(doc), simhash64(edited)), 3);

  SimHashIndex index(3, 1000);
  index.insert(simhash64(doc));
  EXPECT_TRUE(index.contains_near(simhash64(edited)));
}

// How often a one-word edit stays within 3 bits depends on the document's length and the
// shingle size (see simhash.h); pin the measured rates with some margin.
double catch_rate(int words, int shingle_words) {
  int caught = 0;
  const int trials = 100;
  for (int t = 0; t < trials; ++t) {
    const std::string doc = testing::make_prose(words, 1000 + t);
    // Replace the word after the t-th space by one outside the generator's vocabulary.
    size_t start = 0;
    for (int n = 0; n <= t % (words - 1); ++n) start = doc.find(' ', start) + 1;
    const size_t end = doc.find_first_of(" .", start);
    std::string edited = doc;
    edited.replace(start, end - start, "zebra");
    caught += hamming_distance(simhash64(doc, shingle_words), simhash64(edited, shingle_words)) <= 3;
  }
  return caught / static_cast<double>(trials);
}

TEST(SimHash, OneWordEditCatchRate) {
  EXPECT_GE(catch_rate(800, 3), 0.75);
  EXPECT_GE(catch_rate(100, 1), 0.75);
  EXPECT_LT(catch_rate(100, 3), catch_rate(100, 1));
}

TEST(SimHash, UnrelatedDocumentIsNot) {
  const std::string a = testing::make_prose(300, 1);
  const std::string b = testing::make_prose(300, 2);
  EXPECT_GT(hamming_distance(simhash64(a), simhash64(b)), 10);
  SimHashIndex index(3, 1000);
  index.insert(simhash64(a));
  EXPECT_FALSE(index.contains_near(simhash64(b)));
}

TEST(SimHash, CaseAndPunctuationDoNotMatter) {
  EXPECT_EQ(simhash64("The River, the SEA; and the sky!"), simhash64("the river the sea and the sky"));
  EXPECT_EQ(simhash64("Ёлки и ПАЛКИ"), simhash64("елки и палки"));
  EXPECT_EQ(simhash64(""), 0u);
  EXPECT_NE(simhash64("two words"), 0u);  // fewer words than a shingle
}

TEST(SimHashIndex, ExactThresholdAcrossAndWithinBands) {
  const uint64_t base = 0x0123456789abcdefULL;
  SimHashIndex index(3, 100);
  index.insert(base);
  auto flip = [&](std::initializer_list<int> bits) {
    uint64_t fp = base;
    for (int b : bits) fp ^= uint64_t{1} << b;
    return fp;
  };
  EXPECT_TRUE(index.contains_near(base));
  EXPECT_TRUE(index.contains_near(flip({0})));
  EXPECT_TRUE(index.contains_near(flip({1, 17, 33})));      // 3 bits in 3 different bands
  EXPECT_TRUE(index.contains_near(flip({16, 20, 31})));     // 3 bits in one band
  EXPECT_FALSE(index.contains_near(flip({1, 17, 33, 49})));  // 4 bits, one per band: no band equal
  EXPECT_FALSE(index.contains_near(flip({16, 20, 24, 31})));  // 4 bits in one band: a candidate, too far
  EXPECT_FALSE(index.contains_near(flip({0, 1, 2, 3, 4, 5, 6, 7})));
}

// The banded lookup finds exactly what a linear scan finds, for every supported threshold.
TEST(SimHashIndex, MatchesBruteForce) {
  std::mt19937_64 rng(7);
  for (int threshold = 0; threshold <= SimHashIndex::kMaxThreshold; ++threshold) {
    SimHashIndex index(threshold, 5000);
    std::vector<uint64_t> stored;
    for (int i = 0; i < 500; ++i) {
      stored.push_back(rng());
      index.insert(stored.back());
    }
    for (int q = 0; q < 2000; ++q) {
      uint64_t query = stored[rng() % stored.size()];
      const int flips = static_cast<int>(rng() % (threshold + 3));
      for (int f = 0; f < flips; ++f) query ^= uint64_t{1} << (rng() % 64);
      if (q % 10 == 0) query = rng();
      bool expected = false;
      for (uint64_t s : stored) expected |= hamming_distance(s, query) <= threshold;
      ASSERT_EQ(index.contains_near(query), expected) << "threshold " << threshold;
    }
  }
}

TEST(SimHashIndex, CapacityEvictsOldestFirst) {
  SimHashIndex index(3, 3);
  const uint64_t fps[] = {0x1111111111111111ULL, 0x2222222222222222ULL, 0x4444444444444444ULL,
                          0x8888888888888888ULL};
  for (int i = 0; i < 3; ++i) index.insert(fps[i]);
  EXPECT_EQ(index.size(), 3);
  EXPECT_TRUE(index.contains_near(fps[0]));
  index.insert(fps[3]);
  EXPECT_EQ(index.size(), 3);
  EXPECT_EQ(index.evicted(), 1);
  EXPECT_FALSE(index.contains_near(fps[0]));
  EXPECT_TRUE(index.contains_near(fps[1]));
  EXPECT_TRUE(index.contains_near(fps[2]));
  EXPECT_TRUE(index.contains_near(fps[3]));
}

TEST(SimHashIndex, EvictionMatchesASlidingWindow) {
  std::mt19937_64 rng(11);
  const int64_t capacity = 64;
  SimHashIndex index(3, capacity);
  std::deque<uint64_t> window;
  std::vector<uint64_t> all;
  for (int i = 0; i < 1000; ++i) {
    // Repeat an older fingerprint now and then, near or far outside the window.
    uint64_t fp = (i > 0 && i % 5 == 0) ? all[rng() % all.size()] ^ (uint64_t{1} << (rng() % 64)) : rng();
    bool expected = false;
    for (uint64_t s : window) expected |= hamming_distance(s, fp) <= 3;
    ASSERT_EQ(index.contains_near(fp), expected) << "at " << i;
    index.insert(fp);
    all.push_back(fp);
    window.push_back(fp);
    if (static_cast<int64_t>(window.size()) > capacity) window.pop_front();
  }
  EXPECT_EQ(index.size(), capacity);
  EXPECT_EQ(index.evicted(), 1000 - capacity);
}

TEST(TextCleaner, CapacityBoundsHowFarBackDuplicatesAreCaught) {
  CleaningOptions options;
  options.simhash_capacity = 2;
  TextCleaner cleaner(options, StopWords::builtin());
  auto doc = [](uint64_t seed) {
    Document d;
    d.text = testing::make_prose(60, seed);
    d.bytes = static_cast<int64_t>(d.text.size());
    return d;
  };
  EXPECT_EQ(cleaner.check(doc(1)), Verdict::kept);
  EXPECT_EQ(cleaner.check(doc(2)), Verdict::kept);
  EXPECT_EQ(cleaner.check(doc(1)), Verdict::near_duplicate);  // still in the window
  EXPECT_EQ(cleaner.check(doc(3)), Verdict::kept);            // evicts doc 1
  EXPECT_EQ(cleaner.check(doc(1)), Verdict::kept);            // forgotten
  options.simhash_capacity = 0;                               // dedup off
  TextCleaner no_dedup(options, StopWords::builtin());
  EXPECT_EQ(no_dedup.check(doc(1)), Verdict::kept);
  EXPECT_EQ(no_dedup.check(doc(1)), Verdict::kept);
}

}  // namespace
}  // namespace gradbox::data
