#include "tokenizer/gpt2_bpe.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "tokenizer/byte_unicode.h"

namespace gradbox::tokenizer {
namespace fs = std::filesystem;
namespace {

constexpr size_t kCacheEntries = 1 << 18;  // per cache (one per concurrent encode): ~20 MB
// Longer words (long runs of spaces, CJK without spaces) are rare and would bloat the cache.
constexpr size_t kMaxCachedWordBytes = 128;
// encode_word_uncached() keeps its scratch vectors per thread, unless a huge word made them
// this big: their memory is not pinned for the thread's life.
constexpr size_t kKeptScratchSymbols = 1 << 16;

std::string quoted(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::string encoder_json_text, std::string merges_text,
                                   const fs::path& encoder_json_path, const fs::path& merges_path)
    : encoder_json_text_(std::move(encoder_json_text)),
      merges_text_(std::move(merges_text)),
      caches_(kCacheEntries) {
  parse_encoder(encoder_json_path);
  parse_merges(merges_path);
}

void Gpt2BpeTokenizer::parse_encoder(const fs::path& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(encoder_json_text_);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(path.string(), ": not valid JSON: ", e.what()));
  }
  GB_REQUIRE(json.is_object() && !json.empty(), path.string(),
             ": expected a JSON object mapping tokens to ids");
  const int64_t n = static_cast<int64_t>(json.size());
  id_to_bytes_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  bytes_to_id_.reserve(n);
  for (const auto& [token, value] : json.items()) {
    GB_REQUIRE(value.is_number_integer(), path.string(), ": token ", quoted(token), " has id ",
               value.dump(), ", expected an integer");
    const int64_t id = value.get<int64_t>();
    GB_REQUIRE(id >= 0 && id < n, path.string(), ": token ", quoted(token), " has id ", id,
               ", expected ids 0..", n - 1, " (one per token)");
    GB_REQUIRE(!seen[id], path.string(), ": id ", id, " is used by two tokens, one is ",
               quoted(token));
    std::optional<std::string> bytes = byte_level_to_bytes(token);
    GB_REQUIRE(bytes.has_value(), path.string(), ": token ", quoted(token),
               " is not spelled in GPT-2's byte-level alphabet");
    seen[id] = true;
    bytes_to_id_.emplace(*bytes, static_cast<int32_t>(id));
    id_to_bytes_[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    GB_REQUIRE(it != bytes_to_id_.end(), path.string(), ": no token for byte ", b,
               " (byte-level BPE needs all 256)");
    byte_id_[b] = it->second;
  }
  auto eot = bytes_to_id_.find("<|endoftext|>");
  GB_REQUIRE(eot != bytes_to_id_.end(), path.string(), ": no <|endoftext|> token");
  eot_id_ = eot->second;
}

void Gpt2BpeTokenizer::parse_merges(const fs::path& path) {
  auto token_id = [&](std::string_view token, size_t line_no) {
    std::optional<std::string> bytes = byte_level_to_bytes(token);
    GB_REQUIRE(bytes.has_value(), path.string(), ":", line_no, ": ", quoted(token),
               " is not spelled in GPT-2's byte-level alphabet");
    auto it = bytes_to_id_.find(*bytes);
    GB_REQUIRE(it != bytes_to_id_.end(), path.string(), ":", line_no, ": ", quoted(token),
               " is not in the vocabulary");
    return it->second;
  };
  std::string_view rest = merges_text_;
  int32_t rank = 0;
  for (size_t line_no = 1; !rest.empty(); ++line_no) {
    const size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    GB_REQUIRE(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                   line.find(' ', space + 1) == std::string_view::npos,
               path.string(), ":", line_no, ": expected two tokens separated by a space, got ",
               quoted(line));
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const int32_t left_id = token_id(left, line_no), right_id = token_id(right, line_no);
    const int32_t merged_id = token_id(std::string(left) + std::string(right), line_no);
    // A repeated pair takes its last rank, as in encoder.py's dict(zip(merges, range(...))).
    merges_.insert_or_assign(left_id, right_id, {rank++, merged_id});
  }
  GB_REQUIRE(rank > 0, path.string(), ": no merges");
}

// Note [BPE merge order]
// encoder.py repeats: take the adjacent pair with the lowest rank, merge every occurrence of
// it left to right (non-overlapping), until no pair has a rank. That is O(n^2) in the word
// length. Here a heap of candidate pairs (rank, position) gives the same result in
// O(n log n): all heap entries of one rank are the same pair, so they are popped as one batch
// in position order, like one pass of encoder.py; a merge can never recreate the pair of the
// batch (its result is longer than either half), and pairs it creates wait for the next batch.
// Entries made stale by an earlier merge are recognised by the ids they recorded.
void Gpt2BpeTokenizer::encode_word_uncached(std::string_view word,
                                            std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbouring live symbols, -1 at the ends
  };
  struct Candidate {
    int32_t rank, left, left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const auto n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap, batch;
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  heap.clear();
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    const MergeTable::Merge* merge = merges_.find(symbols[left].id, symbols[right].id);
    if (merge == nullptr) return;
    heap.push_back({merge->rank, left, symbols[left].id, symbols[right].id, merge->merged_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const int32_t rank = heap.front().rank;
    batch.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      batch.push_back(heap.back());
      heap.pop_back();
    }
    for (const Candidate& c : batch) {
      Symbol& left = symbols[c.left];
      if (left.id != c.left_id || left.next < 0) continue;  // merged since it was pushed
      const int32_t right_pos = left.next;
      Symbol& right = symbols[right_pos];
      if (right.id != c.right_id) continue;
      left.id = c.merged_id;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.left;
      right.id = -1;
      if (left.prev >= 0) push_pair(left.prev);
      push_pair(c.left);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
  if (symbols.capacity() > kKeptScratchSymbols) {
    symbols = {};
    heap = {};
    batch = {};
  }
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  const WordCachePool::Lease lease = caches_.borrow();
  WordCache& cache = *lease;
  pretokenizer_.split(text, [&](std::string_view word) {
    if (word.size() == 1) {
      ids.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
      return;
    }
    if (word.size() > kMaxCachedWordBytes) {
      encode_word_uncached(word, ids);
      return;
    }
    const uint64_t hash = WordCache::hash(word);
    if (cache.lookup(word, hash, ids)) return;
    const size_t start = ids.size();
    encode_word_uncached(word, ids);
    cache.insert(word, hash, std::span<const int32_t>(ids).subspan(start));
  });
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const auto n = static_cast<int32_t>(id_to_bytes_.size());
  size_t total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    GB_REQUIRE(ids[i] >= 0 && ids[i] < n, "decode: token id ", ids[i], " at position ", i,
               " is outside the GPT-2 vocabulary [0, ", n, ")");
    total += id_to_bytes_[ids[i]].size();
  }
  std::string text;
  text.reserve(total);
  for (int32_t id : ids) text += id_to_bytes_[id];
  return text;
}

void Gpt2BpeTokenizer::write_files(const fs::path& dir, const char* vocab_name,
                                   const char* merges_name) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  GB_REQUIRE(!ec, dir.string(), ": cannot create directory: ", ec.message());
  write_file_atomic(dir / vocab_name, encoder_json_text_);
  write_file_atomic(dir / merges_name, merges_text_);
}

void Gpt2BpeTokenizer::save(const fs::path& dir) const {
  write_files(dir, "encoder.json", "vocab.bpe");
}

void Gpt2BpeTokenizer::save_hf(const fs::path& dir) const {
  write_files(dir, "vocab.json", "merges.txt");
}

std::unique_ptr<Tokenizer> load_gpt2_bpe(const fs::path& encoder_json, const fs::path& merges) {
  return std::make_unique<Gpt2BpeTokenizer>(read_file(encoder_json), read_file(merges),
                                            encoder_json, merges);
}

}  // namespace gradbox::tokenizer
