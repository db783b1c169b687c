#pragma once
// GPT-2's 50,000 merges as a flat open-addressing table: (left id, right id) -> rank and
// merged id. A node-based std::unordered_map missed the CPU cache on most lookups, and BPE of
// a word not yet cached does one lookup per adjacent pair.
#include <cstdint>
#include <vector>

namespace gradbox::tokenizer {

class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  // A repeated pair takes the new value (encoder.py's dict keeps the last rank).
  void insert_or_assign(int32_t left, int32_t right, Merge merge) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    Slot& slot = find_slot(key(left, right));
    if (slot.key == kEmpty) ++size_;
    slot = {key(left, right), merge};
  }

  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = const_cast<MergeTable*>(this)->find_slot(key(left, right));
    return slot.key == kEmpty ? nullptr : &slot.merge;
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static size_t mix(uint64_t k) {  // splitmix64 finalizer: spreads ids over the table
    k ^= k >> 30;
    k *= 0xBF58476D1CE4E5B9ULL;
    k ^= k >> 27;
    k *= 0x94D049BB133111EBULL;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  Slot& find_slot(uint64_t k) {
    const size_t mask = slots_.size() - 1;
    size_t i = mix(k) & mask;
    while (slots_[i].key != k && slots_[i].key != kEmpty) i = (i + 1) & mask;
    return slots_[i];
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
    for (const Slot& s : old)
      if (s.key != kEmpty) find_slot(s.key) = s;
  }

  std::vector<Slot> slots_;  // a power of two, at most half full
  size_t size_ = 0;
};

}  // namespace gradbox::tokenizer
