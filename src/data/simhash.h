#pragma once
// Near-duplicate detection with 64-bit SimHash (Charikar; Manku et al., "Detecting
// near-duplicates for web crawling"): documents whose fingerprints differ in at most k bits
// are near-duplicates.
#include <bit>
#include <cstdint>
#include <string_view>
#include <vector>

namespace gradbox::data {

inline constexpr int kDefaultShingleWords = 3;
inline constexpr int kMaxShingleWords = 8;

// SimHash over overlapping shingles of `shingle_words` case-folded words (words as in
// words.h), each shingle weighted 1. A text with fewer words than a shingle is one shingle; a
// text without words has fingerprint 0.
//
// Sensitivity (measured on pseudo-random prose, 400 edits per length): one word replaced in
// a document of N words moves about 64 * sqrt(2k) / (pi * sqrt(N)) bits for
// k-word shingles. With k = 3 and threshold 3, such an edit is caught in ~30% of 100-word,
// ~56% of 200-word, ~78% of 400-word and ~89% of 800-word documents; smaller k catches more
// (k = 1: >90% from 100 words) but lets unrelated texts that repeat the same few words
// collide. Real near-duplicates (reformatted copies, changed attributions) differ in many
// shingles' positions but share most of them, and are caught about equally by k = 1..3.
uint64_t simhash64(std::string_view text, int shingle_words = kDefaultShingleWords);

inline int hamming_distance(uint64_t a, uint64_t b) { return std::popcount(a ^ b); }

// Note [banded SimHash index]
// Finding every stored fingerprint within Hamming distance k of a query without scanning them
// all: split the 64 bits into k+1 bands. If two fingerprints differ in at most k bits, at
// least one band holds none of those bits (pigeonhole), so it is equal in both. Each band keeps
// a hash table from band value to the fingerprints having it; a lookup walks the k+1 buckets of
// the query and checks the full distance of each candidate. For k = 3 that is 4 bands of 16
// bits: 65,536 buckets per band, so a full index of 4M fingerprints walks about 4 x 61
// candidates per lookup.
//
// Memory is bounded: the index holds at most `capacity` fingerprints in a ring; when full, the
// oldest is evicted (FIFO) before a new one goes in. On inputs larger than that, duplicates
// further apart than `capacity` kept documents are no longer caught, and memory stays at
// about capacity x (8 + 4 (k+1)) bytes plus the bucket heads.
class SimHashIndex {
 public:
  static constexpr int kMaxThreshold = 7;

  SimHashIndex(int threshold, int64_t capacity);

  // True when some stored fingerprint is within the threshold of fp.
  bool contains_near(uint64_t fp) const;
  // Stores fp, evicting the oldest fingerprint when the index is full.
  void insert(uint64_t fp);

  int threshold() const { return threshold_; }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(fingerprints_.size()); }
  int64_t evicted() const { return evicted_; }
  // Upper bound of the index's heap use once full, for the log.
  int64_t memory_bytes() const;

 private:
  struct Band {
    int shift = 0;         // lowest bit of the band in the fingerprint
    uint64_t mask = 0;     // band value mask after shifting
    int bucket_bits = 0;   // log2 of the bucket count
    bool direct = false;   // band value is the bucket index (band no wider than the table)
    std::vector<int32_t> heads;  // bucket -> newest slot, -1 when empty
    std::vector<int32_t> next;   // slot -> next (older) slot in the same bucket, -1 at the end
  };

  size_t bucket_of(const Band& band, uint64_t fp) const;
  void link(Band& band, int32_t slot);
  void unlink(Band& band, int32_t slot);

  int threshold_;
  int64_t capacity_;
  std::vector<Band> bands_;
  std::vector<uint64_t> fingerprints_;  // ring of stored fingerprints
  int64_t oldest_ = 0;                  // ring position to evict next, once full
  int64_t evicted_ = 0;
};

}  // namespace gradbox::data
