// GPT-2 BPE tokenizer files (encoder.json, vocab.bpe) as `gradbox prepare --tokenizer-dir` and a
// checkpoint's tokenizer folder give them: the input up to its first NUL byte is encoder.json,
// the rest vocab.bpe. A tokenizer that loads encodes and decodes some text.
#include <string>

#include "common/error.h"
#include "fuzz_target.h"
#include "tokenizer/gpt2_bpe.h"

using namespace gradbox;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return 0;
  try {
    const tokenizer::Gpt2BpeTokenizer bpe(std::string(input.substr(0, nul)), std::string(input.substr(nul + 1)),
                                          "encoder.json", "vocab.bpe");
    const std::string text = "Hello world, it's 2026! \xff\xfe naïve";
    const std::vector<int32_t> ids = bpe.encode(text);
    (void)bpe.decode(ids);
  } catch (const InputError&) {
  }
  return 0;
}
