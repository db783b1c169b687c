// gradbox's network all-reduce (NetworkExchange: arrival barrier, header, weighted fill,
// bucketed sum, ack; and again with fp16 on the wire) against a bare c10d all_reduce of the same buffer over the same Gloo group size, side
// by side in one run: ranks are forked processes on the loopback interface, and the two are
// measured alternately so that both see the same machine. Prints medians and their ratio.
//   transport_bench [--elements N] [--reps R] [--ranks K]
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "transport/network_exchange.h"

namespace {

using gradbox::transport::NetworkExchange;
using gradbox::transport::NetworkExchangeConfig;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void rank_main(int rank, int ranks, size_t n, int reps, const std::filesystem::path& dir) {
  // The bare group: what a hand-written c10d program would do.
  auto store = c10::make_intrusive<c10d::FileStore>((dir / "bare.store").string(), ranks);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface("lo"));
  auto bare = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("bare/", store),
                                                          rank, ranks, options);
  NetworkExchangeConfig c;
  c.run_id = "bench";
  c.worker = std::string(1, static_cast<char>('a' + rank));
  for (int r = 0; r < ranks; ++r) c.founders.push_back(std::string(1, static_cast<char>('a' + r)));
  c.store_path = dir / "gradbox.store";
  c.interface = "lo";
  c.timeout_s = 120;
  NetworkExchange exchange(c, gradbox::mirror::system_clock());
  exchange.join(dir, -1);
  c.run_id = "bench16";
  c.wire = gradbox::transport::WireDtype::fp16;
  NetworkExchange exchange16(c, gradbox::mirror::system_clock());
  exchange16.join(dir, -1);

  torch::Tensor buffer = torch::rand({static_cast<int64_t>(n)});
  std::vector<float> grad(n, 1.0f);
  std::vector<double> bare_s, gradbox_s, gradbox16_s;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first of each warms up
    std::vector<torch::Tensor> tensors{buffer};
    auto t0 = std::chrono::steady_clock::now();
    bare->allreduce(tensors)->wait();
    if (rep > 0) bare_s.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    exchange.all_reduce(static_cast<uint64_t>(rep + 1), grad.data(), n, {1000, 1.0});
    if (rep > 0) gradbox_s.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    exchange16.all_reduce(static_cast<uint64_t>(rep + 1), grad.data(), n, {1000, 1.0});
    if (rep > 0) gradbox16_s.push_back(seconds_since(t0));
  }
  exchange.leave();
  exchange16.leave();
  if (rank == 0) {
    const double b = median(bare_s), g = median(gradbox_s);
    std::printf("all-reduce of %zu fp32 elements (%.0f MB), %d ranks over Gloo on lo, %d reps (medians):\n", n,
                static_cast<double>(n) * 4 / 1e6, ranks, reps);
    std::printf("  bare c10d allreduce      %8.3f s  (%.2f GB/s of buffer)\n", b, static_cast<double>(n) * 4 / b / 1e9);
    std::printf("  gradbox NetworkExchange  %8.3f s  (%.2f GB/s of buffer)\n", g, static_cast<double>(n) * 4 / g / 1e9);
    std::printf("  ratio gradbox / bare     %8.2fx\n", g / b);
    const double h = median(gradbox16_s);
    std::printf("  gradbox, fp16 on the wire %7.3f s  (%.2fx the bare fp32 time)\n", h, h / b);
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 124'000'000;
  int reps = 5, ranks = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--elements")) n = std::stoull(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranks")) ranks = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "transport_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("gradbox-transport-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids;
  for (int r = 1; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      rank_main(r, ranks, n, reps, dir);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  rank_main(0, ranks, n, reps, dir);
  int failed = 0;
  for (pid_t pid : pids) {
    int s = 0;
    ::waitpid(pid, &s, 0);
    failed += !(WIFEXITED(s) && WEXITSTATUS(s) == 0);
  }
  std::filesystem::remove_all(dir);
  return failed ? 1 : 0;
}
