// Activation checkpointing: memory against time, per strategy (not a test; run by hand).
//
//   bench_checkpointing [--preset gpt2-mini] [--batch 8] [--seq 256] [--steps 3] [--dropout 0.1]
//
// Runs each strategy (none, alternate, all) in its own child process, so allocator state and
// peak RSS are its own, and prints per strategy, with ratios to "none":
//  - held after fwd: heap in use after forward minus before it (mallinfo2): the activations
//    kept for backward, plus the logits;
//  - peak in step: the most heap in use above the step's start during forward+backward
//    (gradients already allocated), sampled every millisecond in a separate, untimed step;
//  - peak RSS of the whole process (weights, gradients, allocator slack; no ratio);
//  - the best forward+backward wall time and CPU time over --steps steps. Wall time needs quiet
//    cores; CPU time is the steadier number on shared ones.
// The gradients must agree bit for bit across strategies (same seed and dropout): the bench
// fails otherwise.
#include <torch/torch.h>

#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/causal_lm.h"

extern char** environ;

namespace {

using namespace gradbox::model;

struct Options {
  std::string preset = "gpt2-mini";
  int64_t batch = 8, seq = 256, steps = 3;
  double dropout = 0.1;
  std::string strategy;  // set in a child
};

struct Result {
  std::string strategy;
  double held_mb = 0, step_peak_mb = 0, peak_rss_mb = 0, wall_s = 0, cpu_s = 0, checksum = 0;
};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double heap_mb() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd) / 1048576.0;  // chunks in use + mmapped
}

// The most heap in use while `fn` runs, sampled every millisecond by a second thread.
template <class Fn>
double peak_heap_mb_during(Fn&& fn) {
  std::atomic<bool> done{false};
  std::atomic<double> peak{heap_mb()};
  std::thread sampler([&] {
    while (!done.load()) {
      peak = std::max(peak.load(), heap_mb());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  fn();
  done = true;
  sampler.join();
  return std::max(peak.load(), heap_mb());
}

// Child: measures one strategy and prints one RESULT line.
int run_one(const Options& o) {
  const ModelConfig config = ModelConfig::preset(o.preset);
  auto model = make_model(config, 1);
  model->train();
  model->set_dropout(o.dropout);
  model->set_activation_checkpointing(ActivationCheckpointing::parse(o.strategy));
  torch::manual_seed(3);
  torch::Tensor data = torch::randint(config.vocab_size, {o.batch, o.seq + 1}, torch::kLong);
  using torch::indexing::Slice;
  const torch::Tensor x = data.index({Slice(), Slice(0, o.seq)}), y = data.index({Slice(), Slice(1)});
  // Gradients stay allocated between steps (zeroed, not freed), as in a trainer that
  // accumulates: what a step adds on top is activations and temporaries.
  auto step = [&](int64_t i) {
    model->zero_grad(/*set_to_none=*/false);
    torch::manual_seed(100 + i);
    language_model_loss(model->forward(x), y).backward();
  };

  Result r;
  step(0);  // warm-up; allocates the gradients
  // The step's peak heap, with the sampler running (so this step is not timed).
  const double start = heap_mb();
  r.step_peak_mb = peak_heap_mb_during([&] { step(0); }) - start;
  r.wall_s = r.cpu_s = 1e30;
  for (int64_t i = 1; i <= o.steps; ++i) {
    model->zero_grad(/*set_to_none=*/false);
    torch::manual_seed(100 + i);
    const double before = heap_mb();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    torch::Tensor loss = language_model_loss(model->forward(x), y);
    r.held_mb = std::max(r.held_mb, heap_mb() - before);
    loss.backward();
    r.cpu_s = std::min(r.cpu_s, cpu_seconds() - c0);
    r.wall_s = std::min(
        r.wall_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (const auto& p : model->parameters()) {
    r.checksum += p.grad().to(torch::kDouble).abs().sum().item<double>();
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("RESULT %s %.6f %.6f %.6f %.6f %.6f %.17g\n", o.strategy.c_str(), r.held_mb,
              r.step_peak_mb, ru.ru_maxrss / 1024.0, r.wall_s, r.cpu_s, r.checksum);
  return 0;
}

Result spawn_one(const Options& o, const std::string& strategy) {
  std::vector<std::string> args = {"bench_checkpointing", "--preset", o.preset,
                                   "--batch", std::to_string(o.batch),
                                   "--seq", std::to_string(o.seq),
                                   "--steps", std::to_string(o.steps),
                                   "--dropout", std::to_string(o.dropout),
                                   "--strategy", strategy};
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
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("child failed: " + out);
  const auto at = out.find("RESULT ");
  char name[64];
  Result r;
  if (at == std::string::npos ||
      std::sscanf(out.c_str() + at, "RESULT %63s %lf %lf %lf %lf %lf %lf", name, &r.held_mb,
                  &r.step_peak_mb, &r.peak_rss_mb, &r.wall_s, &r.cpu_s, &r.checksum) != 7) {
    throw std::runtime_error("no result from child: " + out);
  }
  r.strategy = name;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
    if (key == "--preset") o.preset = value;
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--seq") o.seq = std::stoll(value);
    else if (key == "--steps") o.steps = std::stoll(value);
    else if (key == "--dropout") o.dropout = std::stod(value);
    else if (key == "--strategy") o.strategy = value;
    else {
      std::fprintf(stderr, "unknown option '%s' (see the header of bench_checkpointing.cpp)\n", key.c_str());
      return 2;
    }
  }
  try {
    if (!o.strategy.empty()) return run_one(o);
    const ModelConfig config = ModelConfig::preset(o.preset);
    std::printf("%s (%lld params, %lld layers), batch %lld x %lld, %d threads, dropout %g, "
                "best of %lld steps\n",
                o.preset.c_str(), static_cast<long long>(config.parameter_count()),
                static_cast<long long>(config.n_layer), static_cast<long long>(o.batch),
                static_cast<long long>(o.seq), torch::get_num_threads(), o.dropout,
                static_cast<long long>(o.steps));
    std::printf("%-10s %15s %15s %10s %16s %16s\n", "strategy", "held after fwd", "peak in step",
                "peak RSS", "fwd+bwd wall", "fwd+bwd CPU");
    std::vector<Result> results;
    for (const char* s : {"none", "alternate", "all"}) results.push_back(spawn_one(o, s));
    const Result& base = results.front();
    bool same = true;
    for (const auto& r : results) {
      std::printf("%-10s %6.1f MB %5.2fx %6.1f MB %5.2fx %7.0f MB %7.3f s %5.2fx %7.3f s %5.2fx\n",
                  r.strategy.c_str(), r.held_mb, r.held_mb / base.held_mb, r.step_peak_mb,
                  r.step_peak_mb / base.step_peak_mb, r.peak_rss_mb, r.wall_s, r.wall_s / base.wall_s,
                  r.cpu_s, r.cpu_s / base.cpu_s);
      same = same && r.checksum == base.checksum;
    }
    std::printf("gradients %s across strategies\n", same ? "identical" : "DIFFER");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
