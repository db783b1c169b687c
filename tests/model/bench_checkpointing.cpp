// Activation checkpointing: memory against time, per strategy (not a test; run by hand).
//
//   bench_checkpointing [--preset gpt2-mini] [--batch 8] [--seq 256] [--steps 3]
//
// Runs each strategy (none, alternate, all) in its own child process so peak RSS is its own,
// and prints per strategy: the heap held after forward (activations kept for backward,
// measured with mallinfo2), peak RSS, median forward+backward time, and ratios to "none".
// The gradients must agree bit for bit across strategies (same seed, dropout 0.1): the bench
// fails otherwise.
#include <torch/torch.h>

#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/causal_lm.h"

extern char** environ;

namespace {

using namespace gradbox::model;

struct Options {
  std::string preset = "gpt2-mini";
  int64_t batch = 8, seq = 256, steps = 3;
  std::string strategy;  // set in a child
};

size_t heap_in_use() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;  // small chunks in use + mmapped chunks (big tensors)
}

// Child: time `steps` forward+backward passes of one strategy; print one result line.
int run_one(const Options& o) {
  ModelConfig config = ModelConfig::preset(o.preset);
  auto model = make_model(config, 1);
  model->train();
  model->set_dropout(0.1);
  model->set_activation_checkpointing(ActivationCheckpointing::parse(o.strategy));
  torch::manual_seed(3);
  torch::Tensor data = torch::randint(config.vocab_size, {o.batch, o.seq + 1}, torch::kLong);
  using torch::indexing::Slice;
  torch::Tensor x = data.index({Slice(), Slice(0, o.seq)}), y = data.index({Slice(), Slice(1)});
  std::vector<double> times;
  size_t held = 0;
  double checksum = 0;
  for (int64_t step = 0; step <= o.steps; ++step) {  // step 0 warms up
    model->zero_grad();
    torch::manual_seed(100 + step);
    const size_t before = heap_in_use();
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor loss = language_model_loss(model->forward(x), y);
    const size_t after_forward = heap_in_use();
    loss.backward();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step == 0) continue;
    times.push_back(s);
    held = std::max(held, after_forward - std::min(before, after_forward));
    if (step == o.steps) {
      for (const auto& p : model->parameters()) checksum += p.grad().to(torch::kDouble).abs().sum().item<double>();
    }
  }
  std::sort(times.begin(), times.end());
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  std::printf("RESULT %s %zu %ld %.6f %.17g\n", o.strategy.c_str(), held, ru.ru_maxrss,
              times[times.size() / 2], checksum);
  return 0;
}

struct Result {
  std::string strategy;
  double held_mb = 0, peak_rss_mb = 0, step_s = 0, checksum = 0;
};

Result spawn_one(const Options& o, const std::string& strategy) {
  const std::string self = "/proc/self/exe";
  std::vector<std::string> args = {"bench_checkpointing", "--preset", o.preset, "--batch",
                                   std::to_string(o.batch), "--seq", std::to_string(o.seq),
                                   "--steps", std::to_string(o.steps), "--strategy", strategy};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipefd[2];
  if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    throw std::runtime_error("posix_spawn failed");
  }
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("child failed: " + out);
  const auto at = out.find("RESULT ");
  if (at == std::string::npos) throw std::runtime_error("no result from child: " + out);
  char name[64];
  size_t held = 0;
  long rss_kb = 0;
  Result r;
  if (std::sscanf(out.c_str() + at, "RESULT %63s %zu %ld %lf %lf", name, &held, &rss_kb, &r.step_s,
                  &r.checksum) != 5) {
    throw std::runtime_error("bad result line: " + out);
  }
  r.strategy = name;
  r.held_mb = held / 1048576.0;
  r.peak_rss_mb = rss_kb / 1024.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--preset") o.preset = value;
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--seq") o.seq = std::stoll(value);
    else if (key == "--steps") o.steps = std::stoll(value);
    else if (key == "--strategy") o.strategy = value;
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  try {
    if (!o.strategy.empty()) return run_one(o);
    const auto config = ModelConfig::preset(o.preset);
    std::printf("%s (%lld params, %lld layers), batch %lld x %lld, %d threads, dropout 0.1, "
                "median of %lld steps\n",
                o.preset.c_str(), static_cast<long long>(config.parameter_count()),
                static_cast<long long>(config.n_layer), static_cast<long long>(o.batch),
                static_cast<long long>(o.seq), torch::get_num_threads(),
                static_cast<long long>(o.steps));
    std::printf("%-10s %14s %8s %13s %8s %12s %8s\n", "strategy", "held after fwd", "ratio",
                "peak RSS", "ratio", "fwd+bwd", "ratio");
    std::vector<Result> results;
    for (const char* s : {"none", "alternate", "all"}) results.push_back(spawn_one(o, s));
    bool same = true;
    for (const auto& r : results) {
      const Result& base = results.front();
      std::printf("%-10s %11.1f MB %7.2fx %10.1f MB %7.2fx %10.3f s %7.2fx\n", r.strategy.c_str(),
                  r.held_mb, r.held_mb / base.held_mb, r.peak_rss_mb, r.peak_rss_mb / base.peak_rss_mb,
                  r.step_s, r.step_s / base.step_s);
      same = same && r.checksum == base.checksum;
    }
    std::printf("gradients %s across strategies\n", same ? "identical" : "DIFFER");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
