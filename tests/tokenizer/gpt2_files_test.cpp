// GPT-2 BPE files: a small synthetic vocabulary (merge order edge cases, no shared data
// needed), malformed files, load_tokenizer() and save()/save_hf() round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "reference_bpe.h"
#include "test_util.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/gpt2_bpe.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::tokenizer {
namespace {

using testing::gpt2_dir;
using testing::ReferenceBpe;
using testing::TempDir;

// Expects fn to throw InputError whose message contains every one of parts.
template <class Fn>
void expect_input_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
  }
}

// Writes encoder.json (the 256 bytes as ids 0..255, then extra tokens, then <|endoftext|>)
// and vocab.bpe with the given merges ("left right", raw bytes) into dir.
void write_vocab(const fs::path& dir, const std::vector<std::string>& extra,
                 const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json encoder = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) encoder[bytes_to_byte_level(std::string(1, char(b)))] = id++;
  for (const std::string& token : extra) encoder[bytes_to_byte_level(token)] = id++;
  encoder["<|endoftext|>"] = id++;
  write_file_atomic(dir / "encoder.json", encoder.dump());
  std::string text = "#version: 0.2\n";
  for (const auto& [left, right] : merges)
    text += bytes_to_byte_level(left) + " " + bytes_to_byte_level(right) + "\n";
  write_file_atomic(dir / "vocab.bpe", text);
}

std::vector<int32_t> ids_of(std::initializer_list<int32_t> ids) { return ids; }

TEST(Gpt2BpeSynthetic, OverlappingPairsMergeLeftToRightLikeEncoderPy) {
  TempDir dir;
  write_vocab(dir.path(), {"aa", "aaa"}, {{"a", "a"}, {"aa", "a"}});
  auto tok = load_gpt2_bpe(dir.path() / "encoder.json", dir.path() / "vocab.bpe");
  EXPECT_EQ(tok->vocab_size(), 256 + 2 + 1);
  EXPECT_EQ(tok->eot_id(), 258);
  // "aaaaa": pass 1 merges (a a) twice -> aa aa a; pass 2 merges (aa a) -> aa aaa.
  EXPECT_EQ(tok->encode("aaaaa"), ids_of({256, 257}));
  EXPECT_EQ(tok->encode("aaa"), ids_of({257}));
  ReferenceBpe reference(dir.path() / "encoder.json", dir.path() / "vocab.bpe");
  EXPECT_EQ(reference.encode_word("aaaaa"), ids_of({256, 257}));
}

// Note [BPE merge order]: a merge of rank 1 creates a pair of rank 0 while another rank-1
// occurrence is still waiting. encoder.py finishes the rank-1 pass first; merging the new
// pair at once would give "bcb c" instead.
TEST(Gpt2BpeSynthetic, PairsCreatedDuringAPassWaitForTheNextPass) {
  TempDir dir;
  write_vocab(dir.path(), {"bc", "bcb"}, {{"bc", "b"}, {"b", "c"}});
  auto tok = load_gpt2_bpe(dir.path() / "encoder.json", dir.path() / "vocab.bpe");
  ReferenceBpe reference(dir.path() / "encoder.json", dir.path() / "vocab.bpe");
  EXPECT_EQ(reference.encode_word("bcbc"), ids_of({256, 256}));
  EXPECT_EQ(tok->encode("bcbc"), ids_of({256, 256}));
  EXPECT_EQ(tok->encode("bcb"), ids_of({257}));
}

TEST(Gpt2BpeFiles, MissingFilesAreNamed) {
  TempDir dir;
  write_vocab(dir.path(), {}, {{"a", "b"}});
  expect_input_error([&] { load_gpt2_bpe(dir.path() / "nope.json", dir.path() / "vocab.bpe"); },
                     {"nope.json", "cannot open"});
  expect_input_error([&] { load_gpt2_bpe(dir.path() / "encoder.json", dir.path() / "nope.bpe"); },
                     {"nope.bpe", "cannot open"});
}

TEST(Gpt2BpeFiles, MalformedEncoderJson) {
  TempDir dir;
  write_vocab(dir.path(), {"ab"}, {{"a", "b"}});
  const fs::path encoder = dir.path() / "bad.json", merges = dir.path() / "vocab.bpe";
  auto load_with = [&](const std::string& json) {
    fs::remove(encoder);
    write_file_atomic(encoder, json);
    load_gpt2_bpe(encoder, merges);
  };
  expect_input_error([&] { load_with(R"({"a": 0,)"); }, {encoder.string(), "not valid JSON"});
  expect_input_error([&] { load_with(""); }, {encoder.string(), "not valid JSON"});
  expect_input_error([&] { load_with("[1, 2]"); }, {encoder.string(), "JSON object"});
  expect_input_error([&] { load_with(R"({"a": "x"})"); }, {"\"a\"", "expected an integer"});
  expect_input_error([&] { load_with(R"({"a": 5})"); }, {"\"a\"", "has id 5"});
  expect_input_error([&] { load_with(R"({"a": 0, "b": 0})"); }, {"id 0 is used by two"});
  expect_input_error([&] { load_with(R"({"a": 0, "€": 1})"); }, {"\"€\"", "byte-level alphabet"});
  expect_input_error([&] { load_with(R"({"a": 0})"); }, {"no token for byte 0"});
}

TEST(Gpt2BpeFiles, MalformedMerges) {
  TempDir dir;
  write_vocab(dir.path(), {"ab"}, {{"a", "b"}});
  const fs::path encoder = dir.path() / "encoder.json", merges = dir.path() / "bad.bpe";
  auto load_with = [&](const std::string& text) {
    fs::remove(merges);
    write_file_atomic(merges, text);
    load_gpt2_bpe(encoder, merges);
  };
  expect_input_error([&] { load_with("#version: 0.2\na b\nab\n"); },
                     {merges.string() + ":3", "expected two tokens"});
  expect_input_error([&] { load_with("#version: 0.2\na  b\n"); }, {":2", "expected two tokens"});
  expect_input_error([&] { load_with("#version: 0.2\nab c\n"); }, {":2", "\"abc\"", "not in the"});
  expect_input_error([&] { load_with("#version: 0.2\nzz b\n"); }, {":2", "\"zz\"", "not in the"});
  expect_input_error([&] { load_with("#version: 0.2\n"); }, {merges.string(), "no merges"});
  load_with("#version: 0.2\r\na b\r\n");  // CRLF line ends are fine
}

TEST(LoadTokenizer, MissingOrEmptyFolder) {
  TempDir dir;
  expect_input_error([&] { load_tokenizer(dir.path() / "absent"); },
                     {(dir.path() / "absent").string(), "not found"});
  expect_input_error([&] { load_tokenizer(dir.path()); },
                     {dir.path().string(), "encoder.json", "vocab.bpe", "vocab.json", "merges.txt",
                      "spm.model", "tokenizer.model"});
}

TEST(LoadTokenizer, SaveAndSaveHfRoundTripTheOfficialFiles) {
  GB_REQUIRE_GPT2_FILES();
  TempDir dir;
  auto tok = load_tokenizer(gpt2_dir());
  ASSERT_EQ(tok->kind(), "gpt2-bpe");
  const std::string text = "Hello world, Привет 😀\n\t x";
  const std::vector<int32_t> ids = tok->encode(text);

  tok->save(dir.path() / "own");
  EXPECT_EQ(read_file(dir.path() / "own" / "encoder.json"), read_file(gpt2_dir() / "encoder.json"));
  EXPECT_EQ(read_file(dir.path() / "own" / "vocab.bpe"), read_file(gpt2_dir() / "vocab.bpe"));
  auto own = load_tokenizer(dir.path() / "own");
  EXPECT_EQ(own->kind(), "gpt2-bpe");
  EXPECT_EQ(own->encode(text), ids);

  tok->save_hf(dir.path() / "hf");
  EXPECT_TRUE(fs::is_regular_file(dir.path() / "hf" / "vocab.json"));
  EXPECT_TRUE(fs::is_regular_file(dir.path() / "hf" / "merges.txt"));
  auto hf = load_tokenizer(dir.path() / "hf");
  EXPECT_EQ(hf->encode(text), ids);
  EXPECT_EQ(hf->decode(ids), text);
  EXPECT_EQ(hf->eot_id(), 50256);
}

}  // namespace
}  // namespace gradbox::tokenizer
