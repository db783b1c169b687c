#include "data/token_dataset.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "data/dataset_meta.h"
#include "data/token_shards.h"
#include "test_util.h"

namespace gradbox::data {
namespace {

namespace fs = std::filesystem;

using testing::ByteTokenizer;
using testing::ScratchDir;

// Writes a dataset of the given documents with the byte tokenizer, as prepare would.
SplitStats write_dataset(const fs::path& dir, const ByteTokenizer& tok,
                         const std::vector<std::string>& docs, double val_fraction = 0.3) {
  SplitShardWriter writer(dir, tok.vocab_size(), tok.eot_id(), val_fraction, 1);
  for (const auto& d : docs) writer.add(d, tok.encode(d));
  const SplitStats stats = writer.finish();
  DatasetMeta meta;
  meta.dtype = std::string(dtype_name(dtype_for_vocab(tok.vocab_size())));
  meta.vocab_size = tok.vocab_size();
  meta.eot_id = tok.eot_id();
  meta.tokenizer = tok.kind();
  meta.train_tokens = stats.train_tokens;
  meta.val_tokens = stats.val_tokens;
  meta.train_checksum = stats.train_checksum;
  meta.val_checksum = stats.val_checksum;
  write_file_atomic(dir / kMetaFile, dataset_meta_json(meta));
  return stats;
}

std::vector<std::string> sample_docs(int n) {
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) docs.push_back(testing::make_prose(5 + i % 7, i));
  return docs;
}

// Decodes every document of both splits back and compares with the input multiset.
void expect_round_trip(const fs::path& dir, const ByteTokenizer& tok,
                       const std::vector<std::string>& docs, const std::string& dtype) {
  const DatasetInfo info = read_dataset_info(dir);
  EXPECT_EQ(info.dtype, dtype);
  EXPECT_EQ(info.vocab_size, tok.vocab_size());
  EXPECT_EQ(info.eot_id, 0);
  EXPECT_EQ(info.tokenizer, "bytes");
  std::vector<std::string> decoded;
  for (const char* split : {"train", "val"}) {
    const TokenFile file = TokenFile::open(info, split);
    EXPECT_EQ(file.size(), std::string(split) == "train" ? info.train_tokens : info.val_tokens);
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir / (std::string(split) + ".bin"))),
              file.size() * (dtype == "uint16" ? 2 : 4));
    std::vector<int64_t> ids(static_cast<size_t>(file.size()));
    file.read(0, file.size(), ids.data());
    std::vector<int32_t> current;
    for (int64_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tok.vocab_size());
      if (id == tok.eot_id()) {
        decoded.push_back(tok.decode(current));
        current.clear();
      } else {
        current.push_back(static_cast<int32_t>(id));
      }
    }
    EXPECT_TRUE(current.empty()) << "every document ends with eot";
  }
  std::vector<std::string> expected = docs;
  std::sort(expected.begin(), expected.end());
  std::sort(decoded.begin(), decoded.end());
  EXPECT_EQ(decoded, expected);
}

TEST(TokenDataset, RoundTripUint16) {
  ScratchDir dir;
  const ByteTokenizer tok(50257);
  const auto docs = sample_docs(40);
  const SplitStats stats = write_dataset(dir.path(), tok, docs);
  EXPECT_GT(stats.train_docs, 0);
  EXPECT_GT(stats.val_docs, 0);
  expect_round_trip(dir.path(), tok, docs, "uint16");
}

TEST(TokenDataset, RoundTripUint32) {
  ScratchDir dir;
  const ByteTokenizer tok(70000);  // ids up to 69999 need 32 bits
  const auto docs = sample_docs(40);
  write_dataset(dir.path(), tok, docs);
  expect_round_trip(dir.path(), tok, docs, "uint32");
}

TEST(TokenDataset, ExactlyAtTheUint16Limit) {
  EXPECT_EQ(dtype_for_vocab(65536), TokenDtype::uint16);
  EXPECT_EQ(dtype_for_vocab(65537), TokenDtype::uint32);
  ScratchDir dir;
  const ByteTokenizer tok(65536);  // ids up to 65535
  const auto docs = sample_docs(10);
  write_dataset(dir.path(), tok, docs);
  expect_round_trip(dir.path(), tok, docs, "uint16");
}

TEST(TokenDataset, ReadsAWindowAndChecksBounds) {
  ScratchDir dir;
  const ByteTokenizer tok(300);
  write_dataset(dir.path(), tok, {"abcdef", "ghijkl"}, 0.0);
  TokenFile train = TokenFile::open(read_dataset_info(dir.path()), "train");
  std::vector<int64_t> window(3);
  train.read(1, 3, window.data());
  EXPECT_EQ(window, (std::vector<int64_t>{299 - 'b', 299 - 'c', 299 - 'd'}));
  EXPECT_THROW(train.read(train.size() - 1, 2, window.data()), std::logic_error);
  EXPECT_THROW(train.read(-1, 1, window.data()), std::logic_error);
  train.read(train.size(), 0, window.data());  // empty read at the end is fine
  TokenFile moved = std::move(train);
  EXPECT_EQ(moved.size(), 7);
}

TEST(TokenDataset, SplitIsDeterministicAndBothSplitsAreNonEmpty) {
  // Two documents and a val fraction of 0: the held-back last one still goes to val.
  ScratchDir a;
  const ByteTokenizer tok(300);
  SplitStats s = write_dataset(a.path(), tok, {"first document", "second document"}, 0.0);
  EXPECT_EQ(s.train_docs, 1);
  EXPECT_EQ(s.val_docs, 1);
  // Same inputs, same bytes.
  ScratchDir b;
  const auto docs = sample_docs(200);
  fs::create_directories(a.path() / "x");
  const SplitStats s1 = write_dataset(a.path() / "x", tok, docs, 0.1);
  const SplitStats s2 = write_dataset(b.path(), tok, docs, 0.1);
  EXPECT_EQ(s1.train_checksum, s2.train_checksum);
  EXPECT_EQ(s1.val_checksum, s2.val_checksum);
  EXPECT_GT(s1.val_docs, 5);
  EXPECT_LT(s1.val_docs, 40);
  // The split of a document does not depend on its neighbours.
  EXPECT_EQ(assign_split("some text", 0.5, 1), assign_split("some text", 0.5, 1));
  int val = 0;
  for (int i = 0; i < 1000; ++i) val += assign_split(std::to_string(i), 0.25, 3) == Split::val;
  EXPECT_NEAR(val, 250, 60);
}

void expect_input_error_naming(const std::function<void()>& fn, const std::string& name) {
  try {
    fn();
    FAIL() << "no error; expected one naming " << name;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(TokenDataset, TruncatedFileIsRejectedNamingIt) {
  ScratchDir dir;
  const ByteTokenizer tok(300);
  write_dataset(dir.path(), tok, sample_docs(20));
  const fs::path train = dir / "train.bin";
  fs::resize_file(train, fs::file_size(train) - 2);
  const DatasetInfo info = read_dataset_info(dir.path());
  expect_input_error_naming([&] { TokenFile::open(info, "train"); }, train.string());
  TokenFile::open(info, "val");  // the other file is fine
}

TEST(TokenDataset, FlippedByteIsRejectedNamingIt) {
  ScratchDir dir;
  const ByteTokenizer tok(300);
  write_dataset(dir.path(), tok, sample_docs(20));
  const fs::path train = dir / "train.bin";
  std::string bytes = testing::read_text(train);
  bytes[bytes.size() / 2] ^= 0x01;
  testing::write_text(train, bytes);
  const DatasetInfo info = read_dataset_info(dir.path());
  expect_input_error_naming([&] { TokenFile::open(info, "train"); }, train.string());
}

TEST(TokenDataset, MetaJsonIsValidated) {
  ScratchDir dir;
  const ByteTokenizer tok(300);
  write_dataset(dir.path(), tok, sample_docs(5));
  const fs::path meta_path = dir / "meta.json";
  const nlohmann::json good = nlohmann::json::parse(testing::read_text(meta_path));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    testing::write_text(meta_path, j.dump());
  };

  with([](nlohmann::json& j) { j["version"] = 2; });
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, meta_path.string());
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, "version");

  with([](nlohmann::json& j) { j["format"] = "something-else"; });
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, "format");

  for (const char* key : {"dtype", "vocab_size", "eot_id", "tokenizer", "train_tokens",
                          "val_tokens", "train_checksum", "val_checksum"}) {
    with([&](nlohmann::json& j) { j.erase(key); });
    expect_input_error_naming([&] { read_dataset_info(dir.path()); },
                              str(meta_path.string(), ": missing key '", key, "'"));
  }
  with([](nlohmann::json& j) { j["dtype"] = "uint32"; });  // vocab 300 is uint16
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, "dtype");
  with([](nlohmann::json& j) { j["eot_id"] = 300; });
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, "eot_id");

  testing::write_text(meta_path, "{not json");
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, meta_path.string());
  fs::remove(meta_path);
  expect_input_error_naming([&] { read_dataset_info(dir.path()); }, "not a prepared dataset");
}

TEST(TokenShardWriter, NothingUnderTheFinalNameBeforeCommit) {
  ScratchDir dir;
  {
    TokenShardWriter writer(dir / "train.bin", TokenDtype::uint16, 300);
    const std::vector<int32_t> ids = {1, 2, 3};
    writer.append(ids);
    EXPECT_FALSE(fs::exists(dir / "train.bin"));
    EXPECT_THROW(writer.append(std::vector<int32_t>{300}), std::logic_error);  // outside vocab
  }  // destroyed without commit: the temp file goes too
  EXPECT_TRUE(fs::is_empty(dir.path()));
  TokenShardWriter writer(dir / "train.bin", TokenDtype::uint32, 70000);
  writer.append(std::vector<int32_t>{69999, 0});
  writer.commit();
  EXPECT_EQ(testing::read_text(dir / "train.bin"), std::string("\x6f\x11\x01\x00\x00\x00\x00\x00", 8));
  EXPECT_EQ(writer.checksum(), file_checksum64(dir / "train.bin"));
}

}  // namespace
}  // namespace gradbox::data
