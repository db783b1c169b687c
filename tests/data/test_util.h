#pragma once
// Helpers for the data tests: a scratch folder per test, small files, and a deterministic
// tokenizer that needs no model files.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::data::testing {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed with its contents at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            str("gradbox_data_test.", ::getpid(), ".", counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline void write_text(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One token per byte: id = vocab_size - 1 - byte, so that with a vocabulary above 65536 the
// ids need all 32 bits of uint32 storage. eot_id is 0.
class ByteTokenizer final : public tokenizer::Tokenizer {
 public:
  explicit ByteTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(vocab_size_ - 1 - c);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids)
      if (id != 0) text.push_back(static_cast<char>(vocab_size_ - 1 - id));
    return text;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eot_id() const override { return 0; }
  std::string kind() const override { return "bytes"; }
  void save(const fs::path& dir) const override {
    fs::create_directories(dir);
    write_text(dir / "bytes.txt", std::to_string(vocab_size_));
  }
  void save_hf(const fs::path& dir) const override { save(dir); }

 private:
  int32_t vocab_size_;
};

// Deterministic pseudo-English: `words` words drawn from a fixed vocabulary by an LCG.
inline std::string make_prose(int words, uint64_t seed) {
  static const char* kVocab[] = {
      "the",    "river",   "and",    "of",      "mountain", "a",       "to",     "light",
      "was",    "in",      "forest", "with",    "old",      "stone",   "bridge", "on",
      "quiet",  "morning", "he",     "she",     "walked",   "across",  "valley", "under",
      "clouds", "green",   "fields", "village", "where",    "people",  "lived",  "for",
      "many",   "years",   "beside", "water",   "that",     "flowed",  "slowly", "north",
      "toward", "sea",     "it",     "is",      "from",     "their",   "small",  "houses"};
  std::string text;
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int i = 0; i < words; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    if (i > 0) text += (i % 12 == 0) ? ". " : " ";
    text += kVocab[(state >> 33) % std::size(kVocab)];
  }
  return text + ".";
}

}  // namespace gradbox::data::testing
