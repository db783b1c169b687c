#pragma once
// The per-word cache of GPT-2 BPE (encoder.py keeps one too) and of SentencePiece segments:
// natural text repeats a small set of words, so almost every word is a lookup instead of a
// merge loop. Each encode() call borrows a whole cache from a pool (WordCachePool), so
// lookups take no lock (a shared cache behind mutexes cost more than the regex per word), and
// threads started per batch (std::async) still find warm caches. A cache that reaches
// max_entries is emptied: memory stays bounded on GB corpora with endless rare words, and the
// frequent words come straight back.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/checksum.h"

namespace gradbox::tokenizer {

// Open addressing over flat arrays: a lookup touches one slot and two arenas.
// Not thread-safe; words must be 1..kMaxWordBytes bytes.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 255;

  explicit WordCache(size_t max_entries) : max_entries_(max_entries) { reset(1024); }

  static uint64_t hash(std::string_view word) { return checksum64(word.data(), word.size()); }

  // Appends the ids cached for word to out and returns true; false on a miss.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == hash && s.key_len == word.size() &&
          std::memcmp(keys_.data() + s.key_begin, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_begin, ids_.begin() + s.ids_begin + s.ids_len);
        return true;
      }
    }
  }

  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
    if (word.empty() || word.size() > kMaxWordBytes || ids.size() > 0xFFFF) return;
    if (size_ >= max_entries_) reset(slots_.size());
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
               static_cast<uint16_t>(word.size()), static_cast<uint16_t>(ids.size())});
    keys_.append(word);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++size_;
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_begin = 0, ids_begin = 0;  // offsets into keys_ and ids_
    uint16_t key_len = 0, ids_len = 0;      // key_len 0: empty slot
  };

  void reset(size_t slots) {
    slots_.assign(slots, Slot{});
    mask_ = slots - 1;
    keys_.clear();
    ids_.clear();
    size_ = 0;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.key_len != 0) place(s);
  }
  void place(const Slot& slot) {
    size_t i = slot.hash & mask_;
    while (slots_[i].key_len != 0) i = (i + 1) & mask_;
    slots_[i] = slot;
  }

  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t mask_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0;
  size_t max_entries_;
};

// Caches lent to one encode() call at a time: as many exist as calls ever ran at once.
class WordCachePool {
 public:
  explicit WordCachePool(size_t max_entries_per_cache) : max_entries_(max_entries_per_cache) {}

  class Lease {
   public:
    Lease(const WordCachePool& pool, std::unique_ptr<WordCache> cache)
        : pool_(pool), cache_(std::move(cache)) {}
    ~Lease() { pool_.give_back(std::move(cache_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    WordCache& operator*() const { return *cache_; }

   private:
    const WordCachePool& pool_;
    std::unique_ptr<WordCache> cache_;
  };

  // A cache for the caller alone until the lease ends.
  Lease borrow() const {
    std::unique_ptr<WordCache> cache;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        cache = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!cache) cache = std::make_unique<WordCache>(max_entries_);
    return Lease(*this, std::move(cache));
  }

 private:
  void give_back(std::unique_ptr<WordCache> cache) const {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(cache));
  }

  size_t max_entries_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<WordCache>> free_;
};

}  // namespace gradbox::tokenizer
