// The word cache: lookups after growth, emptying when full, and the pool's reuse of caches.
#include "tokenizer/word_cache.h"

#include <gtest/gtest.h>

#include <thread>

namespace gradbox::tokenizer {
namespace {

std::vector<int32_t> ids_for(int i) { return std::vector<int32_t>(1 + i % 5, i); }

std::string word_for(int i) {
  std::string word = "w";  // not "w" + to_string(i): GCC 12 warns falsely (-Wrestrict)
  word += std::to_string(i);
  return word;
}

TEST(WordCache, FindsWhatWasInsertedAcrossGrowth) {
  WordCache cache(100'000);
  for (int i = 0; i < 20'000; ++i) {  // grows from 1024 slots many times
    const std::string word = word_for(i);
    cache.insert(word, WordCache::hash(word), ids_for(i));
  }
  EXPECT_EQ(cache.size(), 20'000u);
  for (int i = 0; i < 20'000; ++i) {
    const std::string word = word_for(i);
    std::vector<int32_t> out = {-7};  // lookup appends
    ASSERT_TRUE(cache.lookup(word, WordCache::hash(word), out)) << word;
    std::vector<int32_t> expected = ids_for(i);
    expected.insert(expected.begin(), -7);
    ASSERT_EQ(out, expected) << word;
  }
  std::vector<int32_t> out;
  EXPECT_FALSE(cache.lookup("w20000", WordCache::hash("w20000"), out));
  EXPECT_FALSE(cache.lookup("w1 ", WordCache::hash("w1 "), out));
  EXPECT_TRUE(out.empty());
}

TEST(WordCache, EmptiesWhenFullAndSkipsOversizedWords) {
  WordCache cache(10);
  for (int i = 0; i < 10; ++i) {
    const std::string word = word_for(i);
    cache.insert(word, WordCache::hash(word), ids_for(i));
  }
  EXPECT_EQ(cache.size(), 10u);
  cache.insert("new", WordCache::hash("new"), ids_for(1));  // full: starts over
  EXPECT_EQ(cache.size(), 1u);
  std::vector<int32_t> out;
  EXPECT_FALSE(cache.lookup("w3", WordCache::hash("w3"), out));
  EXPECT_TRUE(cache.lookup("new", WordCache::hash("new"), out));
  const std::string huge(WordCache::kMaxWordBytes + 1, 'x');
  cache.insert(huge, WordCache::hash(huge), ids_for(1));
  EXPECT_FALSE(cache.lookup(huge, WordCache::hash(huge), out));
}

TEST(WordCachePool, LendsEachCacheToOneCallerAndReusesIt) {
  WordCachePool pool(100);
  WordCache* first = nullptr;
  {
    const WordCachePool::Lease a = pool.borrow();
    const WordCachePool::Lease b = pool.borrow();
    EXPECT_NE(&*a, &*b);
    first = &*a;
    (*a).insert("kept", WordCache::hash("kept"), ids_for(2));
  }
  // A later caller, even on another thread, gets a returned (warm) cache, not a new one.
  std::thread([&] {
    const WordCachePool::Lease c = pool.borrow();
    const WordCachePool::Lease d = pool.borrow();
    std::vector<int32_t> out;
    const bool warm = (*c).lookup("kept", WordCache::hash("kept"), out) ||
                      (*d).lookup("kept", WordCache::hash("kept"), out);
    EXPECT_TRUE(warm);
    EXPECT_TRUE(&*c == first || &*d == first);
  }).join();
}

}  // namespace
}  // namespace gradbox::tokenizer
