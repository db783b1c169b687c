// AdamW's step with fp32 moments against 8-bit moments (Note [8-bit moments]), one thread, on
// the same moment-like state, side by side: nanoseconds per parameter (median of the repeats)
// and the ratio. Off the test path: scripts/bench/moments_bench.sh runs it.
//   optimizer_bench [--params N] [--repeats R]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/adamw_q8.h"

namespace {

using namespace gradbox::kernels;

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

template <typename F>
double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 16 << 20;
  int repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params")) n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "optimizer_bench: unknown flag %s (--params N, --repeats R)\n", argv[i]);
      return 2;
    }
  }
  // Gradients spread over several orders of magnitude, as a model's are.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> octave(-12.f, 0.f);
  std::vector<float> grad(n), param(n), m(n, 0.f), v(n, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    grad[i] = normal(rng) * std::exp2(octave(rng)) * 1e-2f;
    param[i] = normal(rng) * 0.02f;
  }
  std::vector<float> param_q8 = param;
  const int64_t blocks = (n + kQ8Block - 1) / kQ8Block;
  std::vector<uint8_t> m_codes(n, 0), v_codes(n, 0);
  std::vector<float> m_lo(blocks, 0.f), m_hi(blocks, 0.f), v_lo(blocks, 0.f), v_hi(blocks, 0.f);
  const Q8Moment mq{m_codes.data(), m_lo.data(), m_hi.data()}, vq{v_codes.data(), v_lo.data(), v_hi.data()};

  AdamWStep s;
  s.lr = 1e-3f;
  s.weight_decay = 0.1f;
  std::vector<double> fp32_s, q8_s;
  for (int r = 0; r < repeats; ++r) {
    s.step = r + 1;
    fp32_s.push_back(seconds([&] { adamw_cpu(param.data(), grad.data(), m.data(), v.data(), n, s); }));
    q8_s.push_back(seconds([&] { adamw_q8_cpu(param_q8.data(), grad.data(), mq, vq, n, n, s); }));
  }
  // The first step starts from zero moments; the rest are the steady state.
  fp32_s.erase(fp32_s.begin());
  q8_s.erase(q8_s.begin());
  const double f = median(fp32_s) / n * 1e9, q = median(q8_s) / n * 1e9;
  std::printf("AdamW step, %lld parameters, one thread, median of %d:\n", static_cast<long long>(n), repeats - 1);
  std::printf("  fp32 moments  %6.2f ns/parameter\n", f);
  std::printf("  int8 moments  %6.2f ns/parameter\n", q);
  std::printf("  int8 / fp32   %6.2fx the time\n", q / f);
  return 0;
}
