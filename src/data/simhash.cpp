#include "data/simhash.h"

#include <array>

#include "common/checksum.h"
#include "common/error.h"
#include "data/words.h"

namespace gradbox::data {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Order-sensitive combination of the last `count` word hashes in the ring.
uint64_t shingle_hash(const std::array<uint64_t, kMaxShingleWords>& ring, size_t size,
                      size_t newest, size_t count) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (size_t k = 0; k < count; ++k) {
    const size_t i = (newest + size + 1 - count + k) % size;
    h = mix64(h * 0x100000001b3ULL + ring[i]);
  }
  return h;
}

// Counts, for each of the 64 bit positions, how many features have that bit set. SWAR: lane
// j holds the bits j, j+8, ..., j+56 of every feature in its 8 byte lanes, so one feature
// costs 8 shift-mask-adds instead of 64 branches; lanes are flushed before a byte overflows.
class BitCounter {
 public:
  void add(uint64_t feature) {
    for (int j = 0; j < 8; ++j) lanes_[j] += (feature >> j) & 0x0101010101010101ULL;
    if (++pending_ == 255) flush();
    ++total_;
  }
  // Bits set in more than half of the features.
  uint64_t majority() {
    flush();
    uint64_t fp = 0;
    for (int b = 0; b < 64; ++b)
      if (2 * ones_[b] > total_) fp |= uint64_t{1} << b;
    return fp;
  }

 private:
  void flush() {
    for (int j = 0; j < 8; ++j) {
      for (int i = 0; i < 8; ++i) ones_[8 * i + j] += (lanes_[j] >> (8 * i)) & 0xFF;
      lanes_[j] = 0;
    }
    pending_ = 0;
  }

  std::array<uint64_t, 8> lanes_{};
  std::array<int64_t, 64> ones_{};
  int pending_ = 0;
  int64_t total_ = 0;
};

int ceil_log2(int64_t n) {
  int bits = 0;
  while ((int64_t{1} << bits) < n) ++bits;
  return bits;
}

}  // namespace

uint64_t simhash64(std::string_view text, int shingle_words) {
  GB_CHECK(shingle_words >= 1 && shingle_words <= kMaxShingleWords, "shingle_words ",
           shingle_words);
  const auto k = static_cast<size_t>(shingle_words);
  BitCounter counter;
  std::array<uint64_t, kMaxShingleWords> ring{};
  size_t newest = k - 1;
  size_t words = 0;
  auto vote = [&](uint64_t feature) { counter.add(feature); };
  for_each_word(text, [&](std::string_view w) {
    newest = (newest + 1) % k;
    ring[newest] = checksum64(w.data(), w.size());
    ++words;
    if (words >= k) vote(shingle_hash(ring, k, newest, k));
    return true;
  });
  if (words == 0) return 0;
  if (words < k) vote(shingle_hash(ring, k, newest, words));
  return counter.majority();
}

SimHashIndex::SimHashIndex(int threshold, int64_t capacity)
    : threshold_(threshold), capacity_(capacity) {
  GB_CHECK(threshold >= 0 && threshold <= kMaxThreshold, "threshold ", threshold);
  GB_CHECK(capacity > 0 && capacity < (int64_t{1} << 31), "capacity ", capacity);
  const int band_count = threshold + 1;
  // Enough buckets that chains stay short when full, but not more than the band has values.
  const int table_bits = std::max(4, std::min(24, ceil_log2(capacity) - 4));
  int shift = 0;
  for (int i = 0; i < band_count; ++i) {
    const int width = 64 / band_count + (i < 64 % band_count ? 1 : 0);
    Band band;
    band.shift = shift;
    band.mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
    band.direct = width <= table_bits + 4 && width <= 20;
    band.bucket_bits = band.direct ? width : table_bits;
    band.heads.assign(size_t{1} << band.bucket_bits, -1);
    bands_.push_back(std::move(band));
    shift += width;
  }
  GB_CHECK(shift == 64, "bands cover ", shift, " bits");
}

size_t SimHashIndex::bucket_of(const Band& band, uint64_t fp) const {
  const uint64_t value = (fp >> band.shift) & band.mask;
  if (band.direct) return static_cast<size_t>(value);
  // Fibonacci hashing onto the table: the band value itself may be wider than the table.
  return static_cast<size_t>((value * 0x9e3779b97f4a7c15ULL) >> (64 - band.bucket_bits));
}

bool SimHashIndex::contains_near(uint64_t fp) const {
  for (const Band& band : bands_) {
    for (int32_t s = band.heads[bucket_of(band, fp)]; s >= 0; s = band.next[s]) {
      if (hamming_distance(fingerprints_[s], fp) <= threshold_) return true;
    }
  }
  return false;
}

void SimHashIndex::link(Band& band, int32_t slot) {
  int32_t& head = band.heads[bucket_of(band, fingerprints_[slot])];
  band.next[slot] = head;
  head = slot;
}

void SimHashIndex::unlink(Band& band, int32_t slot) {
  // The evicted slot is the oldest in its chain, hence its tail: one walk down the chain.
  int32_t* link = &band.heads[bucket_of(band, fingerprints_[slot])];
  while (*link != slot) {
    GB_CHECK(*link >= 0, "slot ", slot, " missing from its bucket");
    link = &band.next[*link];
  }
  *link = band.next[slot];
}

void SimHashIndex::insert(uint64_t fp) {
  if (size() < capacity_) {
    const auto slot = static_cast<int32_t>(fingerprints_.size());
    fingerprints_.push_back(fp);
    for (Band& band : bands_) {
      band.next.push_back(-1);
      link(band, slot);
    }
    return;
  }
  const auto slot = static_cast<int32_t>(oldest_);
  for (Band& band : bands_) unlink(band, slot);
  fingerprints_[slot] = fp;
  for (Band& band : bands_) link(band, slot);
  oldest_ = (oldest_ + 1) % capacity_;
  ++evicted_;
}

int64_t SimHashIndex::memory_bytes() const {
  int64_t bytes = capacity_ * static_cast<int64_t>(sizeof(uint64_t));
  for (const Band& band : bands_)
    bytes += capacity_ * 4 + static_cast<int64_t>(band.heads.size()) * 4;
  return bytes;
}

}  // namespace gradbox::data
