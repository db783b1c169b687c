#pragma once
// Stop-word lists for the cheap "is this prose at all" check that runs before the expensive
// filters: real sentences in a language are full of its function words, while menus, lists of
// links, code and keyword spam have few of them.
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace gradbox::data {

class StopWords {
 public:
  StopWords() = default;
  explicit StopWords(const std::vector<std::string>& words);  // folds each word

  static StopWords english();
  static StopWords russian();
  static StopWords builtin();  // English and Russian together
  // One word per line; blank lines and lines starting with '#' are ignored. Throws InputError
  // naming the file when it cannot be read or holds no words.
  static StopWords load(const std::filesystem::path& file);

  bool contains(std::string_view folded_word) const {
#if defined(__cpp_lib_generic_unordered_lookup)
    return words_.count(folded_word) > 0;
#else  // GCC 10 (Debian 11): no lookup by string_view in an unordered set of strings
    return words_.count(std::string(folded_word)) > 0;
#endif
  }
  size_t size() const { return words_.size(); }

  // Number of stop-word occurrences in the text, counting no further than `enough`.
  int64_t count_in(std::string_view text, int64_t enough) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_set<std::string, Hash, std::equal_to<>> words_;
};

}  // namespace gradbox::data
