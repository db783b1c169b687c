#pragma once
// Helpers shared by the tokenizer tests: where the GPT-2 files are, temp folders, random text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

namespace gradbox::tokenizer::testing {

namespace fs = std::filesystem;

inline fs::path gpt2_dir() { return fs::path(GRADBOX_GPT2_DIR); }

inline bool have_gpt2_files() {
  return fs::is_regular_file(gpt2_dir() / "encoder.json") &&
         fs::is_regular_file(gpt2_dir() / "vocab.bpe");
}

// The files ship in data/gpt2: a clone without them is broken, so the tests fail, not skip.
#define GB_REQUIRE_GPT2_FILES()                                   \
  if (!::gradbox::tokenizer::testing::have_gpt2_files())               \
  FAIL() << "GPT-2 files encoder.json + vocab.bpe not found in "       \
         << ::gradbox::tokenizer::testing::gpt2_dir() << " (see data/gpt2/README.md)"

// A fresh folder under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ =
        fs::temp_directory_path() / ("gradbox_tokenizer_test_" + std::to_string(::getpid()) + "_" +
                                     (info ? std::string(info->name()) : std::string("suite")) +
                                     "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Valid UTF-8 that hits every branch of the GPT-2 pattern: words in several scripts, digits,
// punctuation, contractions, runs of mixed whitespace, emoji, combining marks, and now and
// then any code point at all (surrogates excluded).
inline std::string random_utf8(std::mt19937& rng, size_t n_chars) {
  struct Range {
    char32_t lo, hi;
  };
  static const Range kRanges[] = {
      {'a', 'z'},         {'A', 'Z'},       {'0', '9'},       {'!', '/'},
      {0x0430, 0x044F},   {0x0410, 0x042F}, {0x4E00, 0x9FFF}, {0x3040, 0x30FF},
      {0x1F600, 0x1F64F}, {0x0300, 0x036F}, {0x00A0, 0x00FF}, {0x0600, 0x06FF},
  };
  static const char32_t kSpaces[] = {' ', ' ', ' ', '\t', '\n', '\r', 0x00A0, 0x3000, 0x0085};
  static const char* kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'"};
  std::string out;
  std::uniform_int_distribution<int> kind(0, 99);
  for (size_t i = 0; i < n_chars; ++i) {
    const int k = kind(rng);
    if (k < 20) {
      append_utf8(kSpaces[rng() % std::size(kSpaces)], out);
    } else if (k < 23) {
      out += kContractions[rng() % std::size(kContractions)];
    } else if (k < 25) {
      char32_t cp;
      do cp = static_cast<char32_t>(rng() % 0x110000);
      while (cp >= 0xD800 && cp <= 0xDFFF);
      append_utf8(cp, out);
    } else {
      // Stay in one range for a few characters so that words form.
      const Range& r = kRanges[rng() % std::size(kRanges)];
      const int len = 1 + static_cast<int>(rng() % 8);
      for (int j = 0; j < len; ++j) append_utf8(r.lo + rng() % (r.hi - r.lo + 1), out);
    }
  }
  return out;
}

inline std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

}  // namespace gradbox::tokenizer::testing
