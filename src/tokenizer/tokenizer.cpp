#include "tokenizer/tokenizer.h"

#include "common/error.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace gradbox::tokenizer {
namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& dir) {
  GB_REQUIRE(fs::is_directory(dir), dir.string(), ": tokenizer directory not found");
  auto has = [&](const char* name) { return fs::is_regular_file(dir / name); };
  // gradbox's own names first, then Hugging Face's.
  if (has("encoder.json") && has("vocab.bpe"))
    return load_gpt2_bpe(dir / "encoder.json", dir / "vocab.bpe");
  if (has("vocab.json") && has("merges.txt"))
    return load_gpt2_bpe(dir / "vocab.json", dir / "merges.txt");
  if (has("spm.model")) return load_sentencepiece(dir / "spm.model");
  if (has("tokenizer.model")) return load_sentencepiece(dir / "tokenizer.model");
  throw InputError(str(dir.string(), ": no tokenizer found; looked for encoder.json + vocab.bpe ",
                       "or vocab.json + merges.txt (GPT-2 BPE), spm.model or tokenizer.model ",
                       "(SentencePiece)"));
}

}  // namespace gradbox::tokenizer
