// Whole commands in real processes: prepare -> train -> stop/kill -> resume -> sample -> export
// -> import, and what bad input does to each. Each test uses tiny models on real text.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "process.h"

namespace gradbox::testing {
namespace {

TEST_F(CliTest, LossFallsOnRealText) {
  const fs::path run = dir("falls");
  ProcessResult r = run_process(train(run, {"--max-steps", "80", "--eval-interval", "80", "--eval-batches", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> losses;
  double val_loss = -1;
  for (const auto& record : read_metrics(run)) {
    if (record.contains("loss")) losses.push_back(record["loss"].get<double>());
    if (record.contains("val_loss")) val_loss = record["val_loss"].get<double>();
  }
  ASSERT_EQ(losses.size(), 80u);
  const double first = (losses[0] + losses[1] + losses[2]) / 3;
  const double last = (losses[77] + losses[78] + losses[79]) / 3;
  EXPECT_NEAR(first, std::log(512.0), 0.5);  // a fresh model is near uniform over the vocabulary
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  EXPECT_GT(val_loss, 0);
  EXPECT_LT(val_loss, first - 0.5);
  EXPECT_TRUE(contains(r.output, "tok/s")) << r.output;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step_00000080" / "manifest.json"));
}

// Note [Chunked LM head] end to end: the same run with and without it learns the same curve (the
// sums' order differs, so to rounding), and --memory-report shows the plan without training.
TEST_F(CliTest, AChunkedHeadTrainsTheSameCurveAndTheMemoryReportShowsThePlan) {
  const fs::path full = dir("head_full"), chunked = dir("head_chunked");
  ProcessResult a = run_process(train(full, {"--max-steps", "20", "--dropout", "0"}));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ProcessResult b = run_process(train(chunked, {"--max-steps", "20", "--dropout", "0", "--lm-head-chunk", "40"}));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<double> x = losses(full), y = losses(chunked);
  ASSERT_EQ(x.size(), 20u);
  ASSERT_EQ(y.size(), 20u);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4) << "step " << i + 1;
  EXPECT_LT(y.back(), y.front() - 0.3);

  const fs::path report = dir("memory_report");
  ProcessResult r = run_process(train(report, {"--lm-head-chunk", "40", "--memory-report", "--memory-budget-gb", "0.001"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "memory plan:")) << r.output;
  EXPECT_TRUE(contains(r.output, "LM head, chunked (40 rows")) << r.output;
  EXPECT_TRUE(contains(r.output, "DOES NOT FIT")) << r.output;
  EXPECT_FALSE(fs::exists(report)) << "a report trains nothing and writes nothing";
  r = run_process(train(report, {"--lm-head-chunk", "-1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--lm-head-chunk: must be >= 0")) << r.output;
}

// Note [Thermometers] end to end: every third step's metrics line carries each layer's maxima,
// the other steps' none, with activation checkpointing recomputing the layers in backward.
TEST_F(CliTest, ThermometersAreReadEveryIntervalIntoTheMetrics) {
  const fs::path run = dir("thermometer");
  ProcessResult r = run_process(
      train(run, {"--max-steps", "6", "--thermometer-interval", "3", "--activation-checkpointing", "all"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int measured = 0;
  for (const nlohmann::json& line : read_metrics(run)) {
    if (!line.contains("loss")) continue;
    const int step = line["step"].get<int>();
    ASSERT_EQ(line.contains("thermometer"), step % 3 == 0) << line.dump();
    if (step % 3 != 0) continue;
    ++measured;
    for (const char* site : {"attention_logit_max", "mlp_output_max", "residual_max"}) {
      const auto values = line["thermometer"][site].get<std::vector<double>>();
      ASSERT_EQ(values.size(), 2u) << site;  // gpt2-tiny's layers
      for (double v : values) EXPECT_TRUE(std::isfinite(v) && v > 0) << site << " " << v;
    }
  }
  EXPECT_EQ(measured, 2);
}

// Stopped at step 4 and resumed in a new process == never stopped, bit for bit (dropout on, so
// the RNG state must survive too).
class ResumeTest : public CliTest {
 protected:
  void expect_resume_exact(const std::vector<std::string>& model_flags, const std::string& name) {
    const fs::path straight = dir(name + "_straight"), resumed = dir(name + "_resumed");
    std::vector<std::string> flags = model_flags;
    flags.insert(flags.end(), {"--dropout", "0.1", "--checkpoint-interval", "0"});
    ProcessResult a = run_process(train(straight, flags));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    std::vector<std::string> stop = flags;
    stop.insert(stop.end(), {"--stop-at-step", "4"});
    ProcessResult b1 = run_process(train(resumed, stop));
    ASSERT_EQ(b1.exit_code, 0) << b1.output;
    ASSERT_TRUE(fs::exists(resumed / "checkpoints" / "step_00000004"));
    ASSERT_FALSE(fs::exists(resumed / "checkpoints" / "step_00000010"));
    ProcessResult b2 = run_process(train(resumed, flags));
    ASSERT_EQ(b2.exit_code, 0) << b2.output;
    EXPECT_TRUE(contains(b2.output, "at step 4")) << b2.output;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const std::string x = read_bytes(straight / "checkpoints" / "step_00000010" / file);
      const std::string y = read_bytes(resumed / "checkpoints" / "step_00000010" / file);
      ASSERT_FALSE(x.empty());
      EXPECT_TRUE(x == y) << file << " differs between the straight and the resumed run";
    }
  }
};

TEST_F(ResumeTest, BitExactGpt2AdamW) { expect_resume_exact({"--model", "gpt2-tiny"}, "gpt2"); }

// Note [8-bit moments]: the checkpoint keeps the codes, so the resumed run's moments are the
// straight run's bytes.
TEST_F(ResumeTest, BitExactGpt2AdamWWithInt8Moments) {
  expect_resume_exact({"--model", "gpt2-tiny", "--moments", "int8"}, "gpt2_q8");
}

TEST_F(ResumeTest, BitExactLlamaLambAccumulationCheckpointing) {
  expect_resume_exact({"--model", "llama-tiny", "--optimizer", "lamb", "--grad-accum", "2",
                       "--activation-checkpointing", "alternate"},
                      "llama");
}

int64_t newest_step_folder(const fs::path& run) {
  int64_t newest = -1;
  for (const auto& entry : fs::directory_iterator(run / "checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find(".tmp.") == std::string::npos)
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
  }
  return newest;
}

TEST_F(CliTest, KillNineAnywhereThenResume) {
  const fs::path run = dir("killed");
  const std::vector<std::string> flags = {"--max-steps", "100000", "--checkpoint-interval", "3"};
  const pid_t pid = start_process(train(run, flags), dir("killed.log"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(run / "checkpoints" / "step_00000006") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);  // no warning, possibly in the middle of writing the next checkpoint
  ASSERT_EQ(wait_process(pid), 128 + SIGKILL);
  ASSERT_TRUE(fs::exists(run / "checkpoints" / "step_00000006")) << read_bytes(dir("killed.log"));

  const int64_t newest = newest_step_folder(run);
  std::vector<std::string> resume = flags;
  resume.insert(resume.end(), {"--stop-at-step", std::to_string(newest + 2)});
  ProcessResult r = run_process(train(run, resume));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from")) << r.output;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / ("step_" + std::string(8 - std::to_string(newest + 2).size(), '0') +
                                                std::to_string(newest + 2))));
  for (const auto& entry : fs::directory_iterator(run / "checkpoints"))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

// A notebook cell run twice: a second session on a folder in use is refused before it touches
// anything there, and the lock dies with its holder, kill -9 included.
TEST_F(CliTest, ASecondSessionOnTheSameOutIsRefusedUntilTheFirstIsKilled) {
  const fs::path run = dir("twice");
  const std::vector<std::string> flags = {"--max-steps", "100000", "--checkpoint-interval", "3"};
  const pid_t first = start_process(train(run, flags), dir("twice.log"));
  ASSERT_TRUE(wait_for([&] { return fs::exists(run / "checkpoints" / "step_00000003"); }, 120))
      << read_bytes(dir("twice.log"));
  const auto config_written = fs::last_write_time(run / "train_config.json");

  ProcessResult second = run_process(train(run, flags), 120);
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_TRUE(contains(second.output, "--out " + run.string())) << second.output;
  EXPECT_TRUE(contains(second.output, "another gradbox is using this folder (pid " + std::to_string(first)))
      << second.output;
  EXPECT_EQ(fs::last_write_time(run / "train_config.json"), config_written);  // refused before the trainer

  ::kill(first, SIGKILL);
  ASSERT_EQ(wait_process(first), 128 + SIGKILL);
  std::vector<std::string> resume = flags;
  resume.insert(resume.end(), {"--stop-at-step", std::to_string(newest_step_folder(run) + 1)});
  ProcessResult again = run_process(train(run, resume));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "resumed from")) << again.output;
}

TEST_F(CliTest, CorruptNewestCheckpointIsNamedAndSkipped) {
  const fs::path run = dir("corrupt");
  ASSERT_EQ(run_process(train(run, {"--max-steps", "6", "--checkpoint-interval", "3"})).exit_code, 0);
  const fs::path newest = run / "checkpoints" / "step_00000006";
  {
    std::fstream f(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  ProcessResult sample = run_process({kBinary, "sample", "--from", newest.string(), "--max-new-tokens", "5"});
  EXPECT_EQ(sample.exit_code, 2);
  EXPECT_TRUE(contains(sample.output, "model.safetensors")) << sample.output;
  EXPECT_TRUE(contains(sample.output, "checksum")) << sample.output;

  ProcessResult resume = run_process(train(run, {"--max-steps", "8", "--checkpoint-interval", "3"}));
  ASSERT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(contains(resume.output, "skipping checkpoint")) << resume.output;
  EXPECT_TRUE(contains(resume.output, "at step 3")) << resume.output;
}

TEST_F(CliTest, BadInputIsNamedAndLeavesNothing) {
  const fs::path out = dir("bad_out");
  ProcessResult missing = run_process({kBinary, "train", "--data", dir("no_such_data").string(), "--out", out.string()});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.output, "no_such_data")) << missing.output;
  EXPECT_FALSE(fs::exists(out));

  ProcessResult preset = run_process(train(out, {"--model", "gpt5"}));
  EXPECT_EQ(preset.exit_code, 2);
  EXPECT_TRUE(contains(preset.output, "--model")) << preset.output;
  EXPECT_TRUE(contains(preset.output, "gpt5")) << preset.output;

  const fs::path bad_json = dir("bad.json");
  std::ofstream(bad_json) << "{\"lr\": 1e-3,";
  ProcessResult malformed = run_process({kBinary, "train", "--config", bad_json.string(), "--data", data().string()});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_TRUE(contains(malformed.output, "bad.json")) << malformed.output;

  const fs::path unknown = dir("unknown.json");
  std::ofstream(unknown) << "{\"learning_rate\": 1e-3}";
  ProcessResult key = run_process({kBinary, "train", "--config", unknown.string(), "--data", data().string()});
  EXPECT_EQ(key.exit_code, 2);
  EXPECT_TRUE(contains(key.output, "learning_rate")) << key.output;

  ProcessResult flag = run_process(train(out, {"--micro-batch", "0"}));
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_TRUE(contains(flag.output, "--micro-batch")) << flag.output;
  EXPECT_FALSE(fs::exists(out));

  // A truncated token file is caught before any training starts.
  const fs::path broken = dir("broken_data");
  fs::copy(data(), broken, fs::copy_options::recursive);
  fs::resize_file(broken / "train.bin", fs::file_size(broken / "train.bin") - 3);
  ProcessResult truncated = run_process({kBinary, "train", "--data", broken.string(), "--out", out.string()});
  EXPECT_EQ(truncated.exit_code, 2);
  EXPECT_TRUE(contains(truncated.output, "train.bin")) << truncated.output;
  EXPECT_FALSE(fs::exists(out));
}

// gradbox simulate in a real process: a small projection's table, and bad flags named.
TEST_F(CliTest, SimulateProjectsAndNamesBadFlags) {
  // One worker alone uploads ~950 GB a day at this pace and would slow itself down to stay under
  // Drive's cap (Projection.APaceNearTheUploadCapSlowsTheRunDownAsTheExchangeWould tests that):
  // a cap out of reach keeps this about how speed-up grows with workers.
  const std::vector<std::string> small = {kBinary, "simulate", "--model", "gpt2", "--tokens-per-s", "100000",
                                          "--hours", "0.5", "--lag-median", "1", "--lag-p90", "2",
                                          "--upload-cap-gb", "100000"};
  std::vector<std::string> argv = small;
  argv.insert(argv.end(), {"--workers", "1,3"});
  ProcessResult ok = run_process(argv);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "speed-up")) << ok.output;
  std::istringstream rows(ok.output);
  std::vector<std::pair<int, double>> speedups;  // workers -> speed-up
  for (std::string line; std::getline(rows, line);) {
    std::istringstream row(line);
    int workers = 0;
    double per_round = 0, contributors = 0, tokens = 0, speedup = 0;
    if (row >> workers >> per_round >> contributors >> tokens >> speedup) speedups.emplace_back(workers, speedup);
  }
  ASSERT_EQ(speedups.size(), 2u) << ok.output;
  EXPECT_EQ(speedups[0].first, 1);
  EXPECT_EQ(speedups[1].first, 3);
  EXPECT_GT(speedups[1].second, 1.5 * speedups[0].second) << ok.output;
  EXPECT_LT(speedups[1].second, 3.0) << ok.output;

  // DiLoCo with train's default round length (no --inner-steps): the speed-up in time to a loss is
  // the tokens/s speed-up times the mode's token efficiency, given or estimated (Note [Token
  // efficiency]: below 1 for 4 workers at 124M parameters).
  for (const std::string efficiency : {"", "0.5"}) {
    argv = small;
    argv.insert(argv.end(), {"--mode", "diloco", "--workers", "4"});
    if (!efficiency.empty()) argv.insert(argv.end(), {"--token-efficiency", efficiency});
    const ProcessResult diloco = run_process(argv);
    ASSERT_EQ(diloco.exit_code, 0) << diloco.output;
    EXPECT_TRUE(contains(diloco.output, "H=50")) << diloco.output;
    EXPECT_TRUE(contains(diloco.output, "to loss")) << diloco.output;
    std::istringstream lines(diloco.output);
    int parsed = 0;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream row(line);
      int workers = 0;
      double per_round = 0, contributors = 0, tokens = 0, speedup = 0, token_efficiency = 0, to_loss = 0;
      char x = 0;
      if (!(row >> workers >> per_round >> contributors >> tokens >> speedup >> x >> token_efficiency >> to_loss)) continue;
      ++parsed;
      EXPECT_EQ(workers, 4);
      if (efficiency.empty()) {
        EXPECT_GT(token_efficiency, 0.5) << line;
        EXPECT_LT(token_efficiency, 1.0) << line;
      } else {
        EXPECT_EQ(token_efficiency, 0.5) << line;
      }
      // Each column is printed to two decimals: the product is known to ±0.005 of each factor.
      EXPECT_NEAR(to_loss, speedup * token_efficiency, 0.005 * (speedup + token_efficiency) + 0.006) << line;
    }
    EXPECT_EQ(parsed, 1) << diloco.output;
  }
  argv = small;
  argv.insert(argv.end(), {"--token-efficiency", "2"});
  const ProcessResult bad_efficiency = run_process(argv);
  EXPECT_EQ(bad_efficiency.exit_code, 2);
  EXPECT_TRUE(contains(bad_efficiency.output, "--token-efficiency")) << bad_efficiency.output;

  argv = small;
  argv.insert(argv.end(), {"--moments", "int4"});
  const ProcessResult moments = run_process(argv);
  EXPECT_EQ(moments.exit_code, 2);
  EXPECT_TRUE(contains(moments.output, "--moments")) << moments.output;

  argv = small;
  argv.insert(argv.end(), {"--mode", "ring"});
  ProcessResult mode = run_process(argv);
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_TRUE(contains(mode.output, "--mode")) << mode.output;
  argv = small;
  argv.insert(argv.end(), {"--workers", "2,0"});
  ProcessResult workers = run_process(argv);
  EXPECT_EQ(workers.exit_code, 2);
  EXPECT_TRUE(contains(workers.output, "--workers")) << workers.output;
}

TEST_F(CliTest, ExportSampleImportContinue) {
  const fs::path run = dir("export_run");
  ASSERT_EQ(run_process(train(run)).exit_code, 0);
  const fs::path hf = dir("export_hf");
  ProcessResult exported = run_process({kBinary, "export", "--from", run.string(), "--out", hf.string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(fs::exists(hf / "config.json"));
  EXPECT_TRUE(fs::exists(hf / "model.safetensors"));
  // A second export onto a non-empty folder is refused, and the folder is left as it was.
  ProcessResult again = run_process({kBinary, "export", "--from", run.string(), "--out", hf.string()});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_TRUE(contains(again.output, "--force")) << again.output;

  // Greedy samples from the run and from its HF export are the same text.
  auto sample = [&](const fs::path& from) {
    return run_process({kBinary, "--log-level", "warn", "sample", "--from", from.string(), "--prompt", "The ",
                        "--temperature", "0", "--max-new-tokens", "16"});
  };
  ProcessResult from_run = sample(run), from_hf = sample(hf);
  ASSERT_EQ(from_run.exit_code, 0) << from_run.output;
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output;
  EXPECT_EQ(from_run.output, from_hf.output);
  EXPECT_TRUE(contains(from_run.output, "The ")) << from_run.output;
  // It says why it stopped: the token budget, or the model's own end of text.
  EXPECT_TRUE(contains(from_run.output, " new tokens: --max-new-tokens 16 reached)") ||
              contains(from_run.output, " new tokens: the model wrote its end-of-text token)"))
      << from_run.output;
  // Past the end of text, it writes the tokens asked for, whatever the model ends.
  ProcessResult long_sample = run_process({kBinary, "--log-level", "warn", "sample", "--from", run.string(), "--prompt",
                                           "The ", "--max-new-tokens", "40", "--past-end-of-text"});
  ASSERT_EQ(long_sample.exit_code, 0) << long_sample.output;
  EXPECT_TRUE(contains(long_sample.output, "(40 new tokens: --max-new-tokens 40 reached)")) << long_sample.output;

  const fs::path imported = dir("imported_run");
  ProcessResult import = run_process({kBinary, "import", "--from", hf.string(), "--out", imported.string()});
  ASSERT_EQ(import.exit_code, 0) << import.output;
  ProcessResult cont = run_process(train(imported, {"--model", (imported / "model_config.json").string(), "--max-steps", "3"}));
  ASSERT_EQ(cont.exit_code, 0) << cont.output;
  EXPECT_TRUE(contains(cont.output, "resumed from")) << cont.output;
  EXPECT_TRUE(fs::exists(imported / "checkpoints" / "step_00000003"));
}

}  // namespace
}  // namespace gradbox::testing
