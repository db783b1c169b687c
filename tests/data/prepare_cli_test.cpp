// `gradbox prepare` as a user runs it: the built binary in a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

#include "data/token_dataset.h"
#include "test_util.h"

namespace gradbox::data {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

struct RunResult {
  int exit_code = -1;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

// Runs the gradbox binary with the arguments through /bin/sh, standard input from stdin_file.
RunResult run_gradbox(const ScratchDir& dir, const std::vector<std::string>& args,
                      const std::string& stdin_file = "/dev/null") {
  const fs::path err = dir / "stderr.txt";
  std::vector<std::string> words = {quote(GRADBOX_BINARY)};
  for (const auto& a : args) words.push_back(quote(a));
  for (const std::string& w : {std::string("<"), quote(stdin_file), std::string(">"),
                               quote((dir / "stdout.txt").string()), std::string("2>"),
                               quote(err.string())})
    words.push_back(w);
  std::string cmd;
  for (const auto& w : words) cmd.append(cmd.empty() ? "" : " ").append(w);
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = testing::read_text(err);
  return r;
}

std::string corpus() {
  std::string text;
  for (int i = 0; i < 80; ++i) text += testing::make_prose(40 + i % 20, 500 + i) + "\n%\n";
  return text;
}

TEST(PrepareCli, BpeRunWritesADataset) {
  ScratchDir dir;
  testing::write_text(dir / "in" / "fortunes.txt", corpus());
  const RunResult r = run_gradbox(
      dir, {"prepare", "--input", (dir / "in").string(), "--out", (dir / "out").string(),
            "--tokenizer", "bpe", "--vocab-size", "300", "--val-fraction", "0.1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir / "out" / "meta.json"));
  const DatasetInfo info = read_dataset_info(dir / "out");
  EXPECT_EQ(info.vocab_size, 300);
  EXPECT_GT(info.train_tokens, 0);
  EXPECT_GT(info.val_tokens, 0);
  EXPECT_TRUE(fs::exists(dir / "out" / "report.json"));
  EXPECT_NE(r.err.find("kept 80"), std::string::npos) << "report logged:\n" << r.err;

  // A second run into the same folder needs --force.
  const RunResult again = run_gradbox(
      dir, {"prepare", "--input", (dir / "in").string(), "--out", (dir / "out").string(),
            "--vocab-size", "300"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
}

TEST(PrepareCli, ReadsStandardInput) {
  ScratchDir dir;
  testing::write_text(dir / "in.txt", corpus());
  const RunResult r = run_gradbox(dir,
                                  {"prepare", "--input", "-", "--format", "fortune", "--out",
                                   (dir / "out").string(), "--vocab-size", "300"},
                                  (dir / "in.txt").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_dataset_info(dir / "out").vocab_size, 300);
}

TEST(PrepareCli, Gpt2Run) {
  const fs::path gpt2 = fs::path(GRADBOX_GPT2_DIR);
  if (!fs::exists(gpt2 / "encoder.json") || !fs::exists(gpt2 / "vocab.bpe"))
    FAIL() << "no GPT-2 files in " << gpt2 << " (they ship in data/gpt2)";
  ScratchDir dir;
  testing::write_text(dir / "in.txt", corpus());
  const RunResult r = run_gradbox(
      dir, {"prepare", "--input", (dir / "in.txt").string(), "--out", (dir / "out").string(),
            "--tokenizer", "gpt2", "--gpt2-dir", gpt2.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const DatasetInfo info = read_dataset_info(dir / "out");
  EXPECT_EQ(info.vocab_size, 50257);
  EXPECT_EQ(info.dtype, "uint16");
}

TEST(PrepareCli, MissingInputFailsNamingIt) {
  ScratchDir dir;
  const std::string missing = (dir / "no_such_corpus.txt").string();
  const RunResult r = run_gradbox(
      dir, {"prepare", "--input", missing, "--out", (dir / "out").string(), "--vocab-size", "300"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(PrepareCli, BadFlagValueFailsNamingTheFlag) {
  ScratchDir dir;
  testing::write_text(dir / "in.txt", corpus());
  const RunResult r = run_gradbox(dir, {"prepare", "--input", (dir / "in.txt").string(), "--out",
                                        (dir / "out").string(), "--script", "klingon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--script"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gradbox::data
