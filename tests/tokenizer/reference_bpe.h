#pragma once
// A line-by-line port of bpe() from OpenAI's encoder.py (github.com/openai/gpt-2, src/encoder.py):
// the slow, obviously faithful version that Gpt2BpeTokenizer's heap-based merge must agree
// with. Works on the byte-level strings of the files, as encoder.py does, and has its own
// bytes_to_unicode(), so it shares no code with the library.
#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace gradbox::tokenizer::testing {

class ReferenceBpe {
 public:
  ReferenceBpe(const fs::path& encoder_json, const fs::path& vocab_bpe) {
    const nlohmann::json encoder = nlohmann::json::parse(read(encoder_json));
    for (const auto& [token, id] : encoder.items()) encoder_[token] = id.get<int32_t>();
    std::istringstream merges(read(vocab_bpe));
    std::string line;
    std::getline(merges, line);  // "#version: 0.2"
    for (int rank = 0; std::getline(merges, line);) {
      if (line.empty()) continue;
      const size_t space = line.find(' ');
      ranks_[{line.substr(0, space), line.substr(space + 1)}] = rank++;
    }
    // bytes_to_unicode()
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      std::string s;
      append_utf8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++), s);
      byte_encoder_[b] = s;
    }
  }

  // One pre-tokenized word (raw bytes) -> ids.
  std::vector<int32_t> encode_word(std::string_view bytes) const {
    std::vector<std::string> word;
    for (char c : bytes) word.push_back(byte_encoder_[static_cast<unsigned char>(c)]);
    while (word.size() > 1) {
      // bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float('inf')))
      const std::pair<std::string, std::string>* best = nullptr;
      int best_rank = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = ranks_.find({word[i], word[i + 1]});
        if (it != ranks_.end() && (best == nullptr || it->second < best_rank)) {
          best = &it->first;
          best_rank = it->second;
        }
      }
      if (best == nullptr) break;
      std::vector<std::string> merged;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == best->first && word[i + 1] == best->second) {
          merged.push_back(word[i] + word[i + 1]);
          i += 2;
        } else {
          merged.push_back(word[i++]);
        }
      }
      word = std::move(merged);
    }
    std::vector<int32_t> ids;
    for (const std::string& token : word) ids.push_back(encoder_.at(token));
    return ids;
  }

 private:
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::map<std::string, int32_t> encoder_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  std::array<std::string, 256> byte_encoder_;
};

}  // namespace gradbox::tokenizer::testing
