#include "data/prepare.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/token_dataset.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace gradbox::data {
namespace {

namespace fs = std::filesystem;

using testing::ScratchDir;
using testing::write_text;

// A fortune file: 120 distinct prose documents, one exact and one near duplicate, and one of
// each kind the filters drop.
struct Corpus {
  std::vector<std::string> kept;
  std::string file_text;
};

Corpus make_corpus() {
  Corpus c;
  for (int i = 0; i < 120; ++i) c.kept.push_back(testing::make_prose(40 + i % 30, 100 + i));
  std::vector<std::string> all = c.kept;
  all.push_back(c.kept[3]);                                                  // near_duplicate
  all.push_back("Too short.");                                               // too_short
  all.push_back("Buy cheap watches online: best prices, fast delivery, great offers!");  // stop words
  all.push_back("The quick brown fox and the lazy dog jumped over #### $$$$ %%%% &&&& **** ////");
  for (const auto& d : all) c.file_text += d + "\n%\n";
  return c;
}

PrepareOptions base_options(const ScratchDir& dir, const std::string& input) {
  PrepareOptions o;
  o.inputs = {input};
  o.out = dir / "out";
  o.vocab_size = 300;
  o.val_fraction = 0.1;
  o.threads = 2;
  return o;
}

std::vector<std::string> decode_split(const DatasetInfo& info, const tokenizer::Tokenizer& tok,
                                      const std::string& split) {
  const TokenFile file = TokenFile::open(info, split);
  std::vector<int64_t> ids(static_cast<size_t>(file.size()));
  file.read(0, file.size(), ids.data());
  std::vector<std::string> docs;
  std::vector<int32_t> current;
  for (int64_t id : ids) {
    if (id == info.eot_id) {
      docs.push_back(tok.decode(current));
      current.clear();
    } else {
      current.push_back(static_cast<int32_t>(id));
    }
  }
  EXPECT_TRUE(current.empty());
  return docs;
}

void expect_no_dataset(const fs::path& out) {
  if (!fs::exists(out)) return;
  EXPECT_FALSE(fs::exists(out / "meta.json"));
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name != "train.bin" && name != "val.bin" && name != "tokenizer" &&
                name.find(".tmp.") == std::string::npos)
        << "left behind: " << name;
  }
}

void expect_round_trip(const fs::path& out, const std::vector<std::string>& kept) {
  const DatasetInfo info = read_dataset_info(out);
  const auto tok = tokenizer::load_tokenizer(out / "tokenizer");
  EXPECT_EQ(tok->vocab_size(), info.vocab_size);
  EXPECT_EQ(tok->eot_id(), info.eot_id);
  std::vector<std::string> decoded = decode_split(info, *tok, "train");
  const std::vector<std::string> val = decode_split(info, *tok, "val");
  EXPECT_FALSE(val.empty());
  decoded.insert(decoded.end(), val.begin(), val.end());
  std::vector<std::string> expected = kept;
  std::sort(expected.begin(), expected.end());
  std::sort(decoded.begin(), decoded.end());
  EXPECT_EQ(decoded, expected);
}

TEST(Prepare, BpeEndToEnd) {
  ScratchDir dir;
  const Corpus corpus = make_corpus();
  write_text(dir / "in" / "jokes", corpus.file_text);
  const PrepareOptions options = base_options(dir, (dir / "in").string());
  const PrepareReport report = prepare_dataset(options);

  EXPECT_EQ(report.cleaning.docs_of(Verdict::kept), 120);
  EXPECT_EQ(report.cleaning.docs_of(Verdict::near_duplicate), 1);
  EXPECT_EQ(report.cleaning.docs_of(Verdict::too_short), 1);
  EXPECT_EQ(report.cleaning.docs_of(Verdict::few_stopwords), 1);
  EXPECT_EQ(report.cleaning.docs_of(Verdict::high_special_ratio), 1);
  EXPECT_EQ(report.split.train_docs + report.split.val_docs, 120);
  EXPECT_EQ(report.tokenizer, "sentencepiece");

  const fs::path out = options.out;
  const DatasetInfo info = read_dataset_info(out);
  EXPECT_EQ(info.dtype, "uint16");
  EXPECT_EQ(info.vocab_size, 300);
  EXPECT_EQ(info.train_tokens, report.split.train_tokens);
  expect_round_trip(out, corpus.kept);

  const auto r = nlohmann::json::parse(testing::read_text(out / "report.json"));
  EXPECT_EQ(r["cleaning"]["dropped"]["near_duplicate"]["docs"], 1);
  EXPECT_EQ(r["cleaning"]["kept"]["docs"], 120);
  EXPECT_EQ(r["options"]["min_chars"], 50);
  const auto meta = nlohmann::json::parse(testing::read_text(out / "meta.json"));
  EXPECT_EQ(meta["format"], "gradbox-tokens");
  EXPECT_EQ(meta["documents"]["kept"], 120);
  // Nothing but the dataset is left in the folder.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"meta.json", "report.json", "tokenizer", "train.bin",
                                             "val.bin"}));
}

TEST(Prepare, Gpt2EndToEndAndDeterministic) {
  const fs::path gpt2 = fs::path(GRADBOX_GPT2_DIR);
  if (!fs::exists(gpt2 / "encoder.json") || !fs::exists(gpt2 / "vocab.bpe"))
    FAIL() << "no GPT-2 files in " << gpt2 << " (they ship in data/gpt2)";
  ScratchDir dir;
  const Corpus corpus = make_corpus();
  write_text(dir / "in.txt", corpus.file_text);
  PrepareOptions options = base_options(dir, (dir / "in.txt").string());
  options.format = DocumentFormat::fortune;
  options.tokenizer = TokenizerChoice::gpt2;
  options.gpt2_dir = gpt2;
  prepare_dataset(options);
  const DatasetInfo info = read_dataset_info(options.out);
  EXPECT_EQ(info.vocab_size, 50257);
  EXPECT_EQ(info.eot_id, 50256);
  EXPECT_EQ(info.tokenizer, "gpt2-bpe");
  expect_round_trip(options.out, corpus.kept);

  // Another thread count gives the same bytes.
  options.out = dir / "out1";
  options.threads = 1;
  prepare_dataset(options);
  EXPECT_EQ(testing::read_text(dir / "out" / "train.bin"), testing::read_text(dir / "out1" / "train.bin"));
  EXPECT_EQ(testing::read_text(dir / "out" / "val.bin"), testing::read_text(dir / "out1" / "val.bin"));
}

TEST(Prepare, RefusesANonEmptyFolderUnlessForced) {
  ScratchDir dir;
  const Corpus corpus = make_corpus();
  write_text(dir / "in.txt", corpus.file_text);
  PrepareOptions options = base_options(dir, (dir / "in.txt").string());
  prepare_dataset(options);
  const std::string meta_before = testing::read_text(dir / "out" / "meta.json");
  try {
    prepare_dataset(options);
    FAIL() << "overwrote a dataset";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::read_text(dir / "out" / "meta.json"), meta_before);
  options.overwrite = Overwrite::force;
  options.seed = 2;
  write_text(dir / "out" / "notes.txt", "mine");
  prepare_dataset(options);
  EXPECT_NE(testing::read_text(dir / "out" / "meta.json"), meta_before);
  EXPECT_EQ(testing::read_text(dir / "out" / "notes.txt"), "mine");  // not ours: left alone
  read_dataset_info(dir / "out");
}

TEST(Prepare, BadTokenizerDirLeavesNothing) {
  ScratchDir dir;
  write_text(dir / "in.txt", make_corpus().file_text);
  PrepareOptions options = base_options(dir, (dir / "in.txt").string());
  options.tokenizer = TokenizerChoice::gpt2;
  options.gpt2_dir = dir / "no_such_gpt2";
  EXPECT_THROW(prepare_dataset(options), InputError);
  EXPECT_FALSE(fs::exists(options.out));

  // Present but corrupt files: the tokenizer's own error, still before anything is written.
  write_text(dir / "bad_gpt2" / "encoder.json", "{\"a\": ");
  write_text(dir / "bad_gpt2" / "vocab.bpe", "#version: 0.2\n");
  options.gpt2_dir = dir / "bad_gpt2";
  EXPECT_THROW(prepare_dataset(options), InputError);
  EXPECT_FALSE(fs::exists(options.out));
}

TEST(Prepare, FailureMidwayLeavesNoDataset) {
  ScratchDir dir;
  write_text(dir / "in.txt", make_corpus().file_text);
  PrepareOptions options = base_options(dir, (dir / "in.txt").string());
  prepare_dataset(options);  // an old dataset to replace
  // Every document fails the filter: the run stops after the first pass, with the output
  // folder already open. The old dataset is gone (--force) and nothing new is left half-way.
  options.overwrite = Overwrite::force;
  options.cleaning.quality.min_chars = 100'000;
  options.cleaning.quality.max_chars = 200'000;
  try {
    prepare_dataset(options);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no document survived"), std::string::npos) << e.what();
  }
  expect_no_dataset(options.out);
  EXPECT_THROW(read_dataset_info(options.out), InputError);

  // The same with a fresh folder: it is removed again.
  options.out = dir / "fresh";
  options.overwrite = Overwrite::refuse;
  options.tokenizer = TokenizerChoice::gpt2;
  const fs::path gpt2 = fs::path(GRADBOX_GPT2_DIR);
  if (fs::exists(gpt2 / "encoder.json")) {
    options.gpt2_dir = gpt2;
    EXPECT_THROW(prepare_dataset(options), InputError);
    EXPECT_FALSE(fs::exists(options.out));
  }
}

TEST(Prepare, MissingInputIsNamedAndNothingIsCreated) {
  ScratchDir dir;
  PrepareOptions options = base_options(dir, (dir / "missing.txt").string());
  try {
    prepare_dataset(options);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "missing.txt").string()), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(options.out));
}

TEST(Prepare, RejectsBadOptionsNamingTheFlag) {
  ScratchDir dir;
  write_text(dir / "in.txt", "x");
  auto expect_flag = [&](const std::function<void(PrepareOptions&)>& edit, const std::string& flag) {
    PrepareOptions options = base_options(dir, (dir / "in.txt").string());
    edit(options);
    try {
      prepare_dataset(options);
      FAIL() << "no error for " << flag;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  expect_flag([](PrepareOptions& o) { o.cleaning.quality.min_letter_ratio = 1.5; }, "--min-letter-ratio");
  expect_flag([](PrepareOptions& o) { o.cleaning.quality.max_chars = 10; }, "--max-chars");
  expect_flag([](PrepareOptions& o) { o.cleaning.simhash_threshold = 9; }, "--simhash-threshold");
  expect_flag([](PrepareOptions& o) { o.val_fraction = 1.0; }, "--val-fraction");
  expect_flag([](PrepareOptions& o) { o.vocab_size = 100; }, "--vocab-size");
  expect_flag([](PrepareOptions& o) {
    o.tokenizer = TokenizerChoice::gpt2;
    o.gpt2_dir = "/nonexistent/gpt2";
  }, "--gpt2-dir");
  expect_flag([](PrepareOptions& o) { o.stopwords_file = "/nonexistent/sw.txt"; }, "--stopwords");
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
}  // namespace gradbox::data
