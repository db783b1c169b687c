#pragma once
// The fixture of the whole-command tests: real text from Debian's fortunes package, prepared
// once per test process, and a tiny training command.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "process.h"

namespace gradbox::testing {

namespace fs = std::filesystem;

inline const std::string kBinary = GRADBOX_BINARY;

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Creates the file's folder first.
inline void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::vector<nlohmann::json> read_metrics(const fs::path& run) {
  std::vector<nlohmann::json> records;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// A worker's exchange counters (<base>/<name>/sync/exchange/stats.json); {} before the first.
inline nlohmann::json exchange_stats(const fs::path& base, const std::string& name) {
  const std::string text = read_bytes(base / name / "sync" / "exchange" / "stats.json");
  const nlohmann::json j = text.empty() ? nlohmann::json::object() : nlohmann::json::parse(text, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();  // caught mid-write: as if not there yet
}

// The newest round a worker applied, as its counters say.
inline int round_of(const fs::path& base, const std::string& name) { return exchange_stats(base, name).value("round", 0); }

// Polls `condition` every 10 ms for up to `seconds`; false on timeout.
inline bool wait_for(const std::function<bool()>& condition, double seconds = 180) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("gradbox_cli_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    // Real English text from Debian's fortunes package (scripts/setup.sh installs it).
    std::vector<std::string> inputs;
    for (const char* name : {"computers", "science", "literature", "wisdom"}) {
      const fs::path file = fs::path("/usr/share/games/fortunes") / name;
      if (fs::exists(file)) inputs.push_back(file.string());
    }
    if (inputs.empty()) return;
    std::vector<std::string> argv = {kBinary, "prepare", "--out", (root_ / "data").string(), "--tokenizer", "bpe",
                                     "--vocab-size", "512", "--input"};
    argv.insert(argv.end(), inputs.begin(), inputs.end());
    ProcessResult r = run_process(argv);
    prepared_ = r.exit_code == 0;
    if (!prepared_) std::cerr << r.output;
  }
  // GRADBOX_KEEP_TEST_DIRS=1 keeps the runs, logs and shared folders for a look after a failure.
  static void TearDownTestSuite() {
    if (!std::getenv("GRADBOX_KEEP_TEST_DIRS")) fs::remove_all(root_);
  }

  void SetUp() override {
    if (!prepared_) GTEST_SKIP() << "fortunes text not installed or prepare failed (run scripts/setup.sh)";
  }

  static fs::path data() { return root_ / "data"; }
  static fs::path dir(const std::string& name) { return root_ / name; }

  // The checkpoint folder of `steps` in a run.
  static fs::path final_checkpoint(const fs::path& run, int steps) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", steps);
    return run / "checkpoints" / name;
  }

  // Every logged training loss of a run, in order.
  static std::vector<double> losses(const fs::path& run) {
    std::vector<double> out;
    for (const nlohmann::json& r : read_metrics(run))
      if (r.contains("loss")) out.push_back(r["loss"].get<double>());
    return out;
  }

  // A tiny, fast training command; extra flags are appended (CLI11 takes the last value).
  static std::vector<std::string> train(const fs::path& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {kBinary, "train", "--data", data().string(), "--out", out.string(),
                                     "--model", "gpt2-tiny", "--micro-batch", "8", "--max-steps", "10",
                                     "--lr", "3e-3", "--warmup-steps", "2", "--eval-interval", "0",
                                     "--log-interval", "5", "--threads", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  static inline fs::path root_;
  static inline bool prepared_ = false;
};

}  // namespace gradbox::testing
