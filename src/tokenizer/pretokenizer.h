#pragma once
// GPT-2's pre-tokenizer: splits text into the "words" that BPE then encodes one by one, with
// the regular expression from OpenAI's encoder.py, run by PCRE2 (UTF + UCP, JIT-compiled).
#include <functional>
#include <string_view>

struct pcre2_real_code_8;

namespace gradbox::tokenizer {

class Gpt2Pretokenizer {
 public:
  // ascii_fast_path: ASCII runs are split by hand-written code that mirrors the pattern (3-4x
  // faster on English); everything else, and every match that touches a non-ASCII byte, goes
  // to PCRE2. pcre2_only: every match by PCRE2, the reference the fast path is tested against.
  enum class Engine { ascii_fast_path, pcre2_only };

  explicit Gpt2Pretokenizer(Engine engine = Engine::ascii_fast_path);
  ~Gpt2Pretokenizer();
  Gpt2Pretokenizer(const Gpt2Pretokenizer&) = delete;
  Gpt2Pretokenizer& operator=(const Gpt2Pretokenizer&) = delete;

  // Calls emit with each word of text in order, as views into text; they concatenate back to
  // text. Bytes that are not valid UTF-8 match no part of the pattern: each maximal run of
  // them becomes a word of its own, so that BPE still sees (and round-trips) every byte.
  // A callback rather than a vector of words: text may be a whole GB-sized shard.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  Engine engine_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace gradbox::tokenizer
